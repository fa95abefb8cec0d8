#include "dynamic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

namespace edgenlp {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // the shortest form that reads back as v (what Python's repr prints)
  for (int p = 1; p <= 17; ++p) {
    char s[32];
    std::snprintf(s, sizeof s, "%.*g", p, v);
    if (std::strtod(s, nullptr) == v) return s;
  }
  return buf;
}

bool is_int(const json::Value* v) {
  return v != nullptr && v->is_number() && std::floor(v->as_number()) == v->as_number() &&
         std::fabs(v->as_number()) < 1e15;
}

// Python's bool() of a JSON value (absent = false).
bool truthy(const json::Value* v) {
  if (v == nullptr) return false;
  switch (v->type()) {
    case json::Value::Type::kNull: return false;
    case json::Value::Type::kBool: return v->as_bool();
    case json::Value::Type::kNumber: return v->as_number() != 0.0;
    case json::Value::Type::kString: return !v->as_string().empty();
    case json::Value::Type::kArray: return !v->as_array().empty();
    case json::Value::Type::kObject: return !v->as_object().empty();
  }
  return false;
}

std::string list(const std::vector<std::size_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

bool contains(const std::vector<std::size_t>& v, std::size_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Ascending, distinct integers in [lo, hi]; false otherwise.
bool layer_list(const json::Value* v, std::size_t lo, std::size_t hi, std::vector<std::size_t>* out) {
  out->clear();
  if (v == nullptr || !v->is_array()) return false;
  for (const auto& e : v->as_array()) {
    if (!is_int(&e) || e.as_number() < static_cast<double>(lo) || e.as_number() > static_cast<double>(hi)) return false;
    const auto x = static_cast<std::size_t>(e.as_number());
    if (!out->empty() && x <= out->back()) return false;
    out->push_back(x);
  }
  return true;
}

// np.max over doubles: NaN when any is NaN.
double nan_max(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) {
    if (std::isnan(x)) return x;
    m = std::max(m, x);
  }
  return m;
}

// The spec (DynamicSpec.from_dict + __post_init__).
bool parse_spec(const json::Value* s, DynamicInfo* out, std::string* why) {
  if (s == nullptr || !s->is_object()) {
    *why = "expected a DynamicSpec dict";
    return false;
  }
  static const std::set<std::string> known = {"type", "version", "num_layers", "exits", "rule", "threshold",
                                              "tokens", "token_layers", "token_thresholds", "keep_ratio"};
  for (const auto& [key, value] : s->as_object()) {
    if (known.count(key) == 0) {
      *why = "DynamicSpec: unknown field(s) " + key;
      return false;
    }
  }
  if (const json::Value* v = s->get("version"); v != nullptr && (!is_int(v) || v->as_number() > 1)) {
    *why = "DynamicSpec version is newer than this libedgenlp supports (1)";
    return false;
  }
  if (const json::Value* t = s->get("type"); t != nullptr && (!t->is_string() || t->as_string() != "DynamicSpec")) {
    *why = "expected a DynamicSpec dict";
    return false;
  }
  const json::Value* L = s->get("num_layers");
  if (!is_int(L) || L->as_number() < 1 || L->as_number() > 1e6) {
    *why = "num_layers must be >= 1";
    return false;
  }
  out->num_layers = static_cast<std::size_t>(L->as_number());
  const std::size_t n = out->num_layers;
  if (!layer_list(s->get("exits"), 1, n, &out->exits) || out->exits.empty() || out->exits.back() != n) {
    *why = "exits must be ascending layer numbers in 1.." + std::to_string(n) + " ending at " + std::to_string(n);
    return false;
  }
  const json::Value* rule = s->get("rule");
  const std::string rule_name = rule == nullptr ? "maxprob" : rule->is_string() ? rule->as_string() : "";
  if (rule_name == "maxprob") {
    out->rule = ExitRule::kMaxProb;
  } else if (rule_name == "entropy") {
    out->rule = ExitRule::kEntropy;
  } else if (rule_name == "patience") {
    out->rule = ExitRule::kPatience;
  } else {
    *why = "rule must be one of maxprob, entropy, patience";
    return false;
  }
  const json::Value* th = s->get("threshold");
  out->threshold = 1.0;
  if (th != nullptr) {
    if (!th->is_number()) {
      *why = "threshold must be a number";
      return false;
    }
    out->threshold = th->as_number();
  }
  if (std::string e = check_threshold(out->rule, out->threshold, out->exits.size()); !e.empty()) {
    *why = e;
    return false;
  }
  const json::Value* tokens = s->get("tokens");
  const std::string mode = tokens == nullptr ? "none" : tokens->is_string() ? tokens->as_string() : "";
  if (mode == "none") {
    out->tokens = TokenMode::kNone;
  } else if (mode == "ltp") {
    out->tokens = TokenMode::kLtp;
  } else if (mode == "keep") {
    out->tokens = TokenMode::kKeep;
  } else {
    *why = "tokens must be one of none, ltp, keep";
    return false;
  }
  out->token_layers.clear();
  if (const json::Value* tl = s->get("token_layers"); tl != nullptr && !layer_list(tl, 1, n - 1, &out->token_layers)) {
    *why = "token_layers must be ascending layer numbers in 1.." + std::to_string(n - 1);
    return false;
  }
  if (out->tokens == TokenMode::kNone && !out->token_layers.empty()) {
    *why = "token_layers given but tokens is 'none'";
    return false;
  }
  out->keep_ratio = 1.0;
  if (const json::Value* k = s->get("keep_ratio"); k != nullptr) {
    if (!k->is_number()) {
      *why = "keep_ratio must be in (0, 1]";
      return false;
    }
    out->keep_ratio = k->as_number();
  }
  if (!check_keep_ratio(out->keep_ratio).empty()) {
    *why = "keep_ratio must be in (0, 1], got " + num(out->keep_ratio);
    return false;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ths;
  bool any = false;
  if (const json::Value* t = s->get("token_thresholds"); t != nullptr && !t->is_null()) {
    if (!t->is_array()) {
      *why = "token_thresholds must be a list";
      return false;
    }
    for (const auto& x : t->as_array()) {
      if (x.is_null()) {
        ths.push_back(nan);
      } else if (x.is_number()) {
        ths.push_back(x.as_number());
        any = true;
      } else {
        *why = "token_thresholds must hold numbers or null";
        return false;
      }
    }
  }
  if (out->tokens == TokenMode::kLtp) {
    bool ok = ths.size() == n;
    for (std::size_t i = 0; ok && i < n; ++i) ok = std::isnan(ths[i]) != contains(out->token_layers, i + 1);
    if (!ok) {
      *why = "token_thresholds must list " + std::to_string(n) + " values, a number exactly at the token layers " +
             list(out->token_layers);
      return false;
    }
    for (double x : ths) {
      if (!std::isnan(x) && x < 0) {
        *why = "token thresholds must be >= 0";
        return false;
      }
    }
  } else if (any) {
    *why = "token_thresholds are for tokens='ltp'";
    return false;
  }
  out->token_thresholds = ths;
  return true;
}

}  // namespace

const char* exit_rule_name(ExitRule rule) {
  switch (rule) {
    case ExitRule::kMaxProb: return "maxprob";
    case ExitRule::kEntropy: return "entropy";
    case ExitRule::kPatience: return "patience";
  }
  return "?";
}

std::string check_threshold(ExitRule rule, double value, std::size_t num_exits) {
  if (std::isnan(value)) return "exit threshold must be a number, got nan";
  if (rule == ExitRule::kPatience) {
    if (std::floor(value) != value || value < 1 || value > static_cast<double>(num_exits))
      return "exit threshold for rule patience must be an integer from 1 to " + std::to_string(num_exits) + ", got " +
             num(value);
    return "";
  }
  if (!(value >= 0.0 && value <= 1.0))
    return std::string("exit threshold for rule ") + exit_rule_name(rule) + " (" +
           (rule == ExitRule::kMaxProb ? "the max probability" : "the normalized entropy") + ") must be in [0, 1], got " +
           num(value);
  return "";
}

std::string check_keep_ratio(double value) {
  if (!(value > 0.0 && value <= 1.0)) return "keep ratio must be in (0, 1], got " + num(value);
  return "";
}

// numpy's pairwise summation (pairwise_sum in numpy/_core/src/umath/loops_utils.h.src): blocks of up to
// 128 values summed in 8 interleaved partial sums, longer runs split in halves at a multiple of 8.
double pairwise_sum(const double* a, std::size_t n) {
  if (n < 8) {
    double res = 0.0;
    for (std::size_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j) r[j] = a[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (std::size_t j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  std::size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

std::size_t smallest_bucket(const std::vector<std::size_t>& buckets, std::size_t n) {
  for (std::size_t i = 0; i < buckets.size(); ++i)
    if (buckets[i] >= n) return i;
  return buckets.size();
}

std::size_t argmax_first(const float* v, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(v[i])) return i;
    if (v[i] > v[best]) best = i;
  }
  return best;
}

double exit_confidence(ExitRule rule, const float* logits, std::size_t n) {
  // probabilities(): z - z.max(), exp, divided by the pairwise sum, all in double
  std::vector<double> z(logits, logits + n);
  const double mx = nan_max(z);
  for (double& x : z) x = std::exp(x - mx);
  const double sum = pairwise_sum(z.data(), n);
  for (double& x : z) x = x / sum;
  if (rule == ExitRule::kMaxProb) return nan_max(z);
  if (n <= 1) return 0.0;
  std::vector<double> terms;
  terms.reserve(n);
  for (double p : z)
    if (p > 0) terms.push_back(p * std::log(p));
  return -pairwise_sum(terms.data(), terms.size()) / std::log(static_cast<double>(n));
}

bool ExitState::fires(const float* logits, std::size_t n) {
  if (rule_ == ExitRule::kPatience) {
    const auto label = static_cast<std::int64_t>(argmax_first(logits, n));
    streak_ = label == previous_ ? streak_ + 1 : 1;
    previous_ = label;
    return static_cast<double>(streak_) >= threshold_;
  }
  const double score = exit_confidence(rule_, logits, n);
  return rule_ == ExitRule::kMaxProb ? score >= threshold_ : score <= threshold_;
}

std::size_t keep_count(std::size_t n, double ratio) {
  const double want = std::ceil(ratio * static_cast<double>(n));
  const std::size_t k = want >= static_cast<double>(n) ? n : static_cast<std::size_t>(std::max(want, 0.0));
  return std::max(std::min<std::size_t>(n, 2), k);
}

void keep_tokens(const float* importance, std::size_t n, TokenMode mode, double threshold, double ratio,
                 std::vector<std::size_t>* keep) {
  keep->clear();
  if (n <= 2 || mode == TokenMode::kNone) {
    for (std::size_t i = 0; i < n; ++i) keep->push_back(i);
    return;
  }
  std::vector<char> kept(n, 0);
  if (mode == TokenMode::kLtp) {
    const auto th = static_cast<float>(threshold);
    for (std::size_t i = 0; i < n; ++i) kept[i] = importance[i] >= th;
  } else {
    // np.argsort(-score, kind="stable") with score[0] = score[n-1] = inf: NaN sorts last, ties keep index order
    std::vector<double> key(n);
    for (std::size_t i = 0; i < n; ++i) key[i] = -static_cast<double>(importance[i]);
    key[0] = key[n - 1] = -std::numeric_limits<double>::infinity();
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (std::isnan(key[a])) return false;
      if (std::isnan(key[b])) return true;
      return key[a] < key[b];
    });
    const std::size_t k = keep_count(n, ratio);
    for (std::size_t i = 0; i < k; ++i) kept[order[i]] = 1;
  }
  kept[0] = kept[n - 1] = 1;
  for (std::size_t i = 0; i < n; ++i)
    if (kept[i]) keep->push_back(i);
}

bool parse_dynamic(const json::Value& manifest, std::size_t num_labels, DynamicInfo* out, std::string* error) {
  *out = DynamicInfo();
  auto bad = [&](const std::string& msg) {
    *error = "dynamic: " + msg;
    return false;
  };
  const json::Value* d = manifest.get("dynamic");
  if (d == nullptr || !d->is_object()) return bad("must be an object");
  const json::Value* version = d->get("version");
  if (!is_int(version) || version->as_number() != 1)
    return bad("version is not supported by this libedgenlp (expected 1)");
  std::string why;
  if (!parse_spec(d->get("spec"), out, &why)) return bad("invalid spec (" + why + ")");
  const std::size_t L = out->num_layers;
  const json::Value* model = manifest.get("model");
  const json::Value* shape = model != nullptr ? model->get("shape") : nullptr;
  auto shape_value = [&](const char* key) -> const json::Value* {
    const json::Value* v = shape != nullptr ? shape->get(key) : nullptr;
    return v != nullptr && !v->is_null() ? v : nullptr;
  };
  const json::Value* dl = d->get("num_layers");
  const json::Value* sl = shape_value("num_layers");
  if (!is_int(dl) || dl->as_number() != static_cast<double>(L) ||
      (sl != nullptr && (!sl->is_number() || sl->as_number() != static_cast<double>(L))))
    return bad("num_layers disagrees with the spec (" + std::to_string(L) + ") or the model (" +
               (sl != nullptr ? num(sl->as_number()) : std::string("?")) + ")");
  const json::Value* hidden = d->get("hidden");
  const json::Value* sh = shape_value("hidden");
  if (!is_int(hidden) || hidden->as_number() < 1 || hidden->as_number() > 1e6 ||
      (sh != nullptr && (!sh->is_number() || sh->as_number() != hidden->as_number())))
    return bad("hidden " + (hidden != nullptr && hidden->is_number() ? num(hidden->as_number()) : std::string("?")) +
               " disagrees with the model's " + (sh != nullptr ? num(sh->as_number()) : std::string("?")));
  out->hidden = static_cast<std::size_t>(hidden->as_number());
  const json::Value* labels = d->get("num_labels");
  if (!is_int(labels) || labels->as_number() != static_cast<double>(num_labels))
    return bad("num_labels is not the " + std::to_string(num_labels) + " labels");
  out->num_labels = num_labels;
  if (!layer_list(d->get("buckets"), 2, 1000000, &out->buckets) || out->buckets.empty())
    return bad("buckets must be ascending sequence lengths >= 2");
  const json::Value* artifacts = manifest.get("artifacts");
  const bool has_pte = artifacts != nullptr && artifacts->get("pte") != nullptr && !artifacts->get("pte")->is_null();

  // entry["pte"]: {"S": method} for every bucket, into methods[i] for buckets[i]
  auto methods = [&](const json::Value* entry, const std::string& what, std::vector<std::string>* names) {
    names->clear();
    if (!has_pte) return true;
    const json::Value* m = entry != nullptr ? entry->get("pte") : nullptr;
    const std::size_t nb = out->buckets.size();
    if (m == nullptr || !m->is_object() || m->as_object().size() != nb)
      return bad(what + ": pte must name one method per bucket " + list(out->buckets));
    names->assign(nb, std::string());
    for (const auto& [key, value] : m->as_object()) {
      std::size_t seq = 0;
      bool digits = !key.empty() && key.size() < 8;
      for (char c : key) {
        digits = digits && c >= '0' && c <= '9';
        if (digits) seq = seq * 10 + static_cast<std::size_t>(c - '0');
      }
      const auto it = std::find(out->buckets.begin(), out->buckets.end(), seq);
      if (!digits || it == out->buckets.end() || !value.is_string() || value.as_string().empty())
        return bad(what + ": pte must name one method per bucket " + list(out->buckets));
      (*names)[static_cast<std::size_t>(it - out->buckets.begin())] = value.as_string();
    }
    return true;
  };

  if (!methods(d->get("embedding"), "embedding", &out->embed_methods)) return false;
  const json::Value* raw = d->get("segments");
  if (raw == nullptr || !raw->is_array() || raw->as_array().empty()) return bad("segments must be a non-empty list");
  std::size_t expect = 1;
  for (std::size_t k = 0; k < raw->as_array().size(); ++k) {
    const json::Value& s = raw->as_array()[k];
    const std::string name = "segment " + std::to_string(k);
    if (!s.is_object()) return bad(name + " must be an object");
    const json::Value* layers = s.get("layers");
    bool ok = layers != nullptr && layers->is_array() && layers->as_array().size() == 2 &&
              is_int(&layers->as_array()[0]) && is_int(&layers->as_array()[1]);
    SegmentInfo seg;
    if (ok) {
      const double a = layers->as_array()[0].as_number(), b = layers->as_array()[1].as_number();
      ok = a == static_cast<double>(expect) && b >= a && b <= static_cast<double>(L);
      if (ok) {
        seg.first = static_cast<std::size_t>(a);
        seg.last = static_cast<std::size_t>(b);
      }
    }
    if (!ok)
      return bad(name + " covers the wrong layers; segments must cover layers 1.." + std::to_string(L) +
                 " in order (this one should start at layer " + std::to_string(expect) + ")");
    seg.exit = truthy(s.get("exit"));
    seg.tokens = truthy(s.get("tokens"));
    const std::string range = " (layers " + std::to_string(seg.first) + "-" + std::to_string(seg.last) + ")";
    if (seg.exit != contains(out->exits, seg.last) || seg.tokens != contains(out->token_layers, seg.last))
      return bad(name + range + ": exit/tokens disagree with the spec's exits " + list(out->exits) +
                 " and token layers " + list(out->token_layers));
    for (std::size_t l = seg.first; l < seg.last; ++l)
      if (contains(out->exits, l) || contains(out->token_layers, l))
        return bad(name + range + " runs past an exit or token layer");
    if (const json::Value* outs = s.get("outputs"); outs != nullptr) {
      std::vector<std::string> want = {"hidden"};
      if (seg.exit) want.push_back("logits");
      if (seg.tokens) want.push_back("importance");
      bool same = outs->is_array() && outs->as_array().size() == want.size();
      for (std::size_t i = 0; same && i < want.size(); ++i)
        same = outs->as_array()[i].is_string() && outs->as_array()[i].as_string() == want[i];
      if (!same) return bad(name + ": outputs should be the segment's hidden[, logits][, importance]");
    }
    if (!methods(&s, name, &seg.methods)) return false;
    out->segments.push_back(std::move(seg));
    expect = out->segments.back().last + 1;
  }
  if (expect != L + 1)
    return bad("segments end at layer " + std::to_string(expect - 1) + ", the model has " + std::to_string(L));
  std::set<std::string> names(out->embed_methods.begin(), out->embed_methods.end());
  std::size_t count = out->embed_methods.size();
  for (const auto& seg : out->segments) {
    names.insert(seg.methods.begin(), seg.methods.end());
    count += seg.methods.size();
  }
  if (names.size() != count) return bad("a pte method is listed twice");
  const json::Value* rule = d->get("rule");
  const json::Value* rname = rule != nullptr ? rule->get("name") : nullptr;
  const json::Value* rth = rule != nullptr ? rule->get("threshold") : nullptr;
  if (rname == nullptr || !rname->is_string() || rname->as_string() != exit_rule_name(out->rule) || rth == nullptr ||
      !rth->is_number() || rth->as_number() != out->threshold)
    return bad(std::string("rule disagrees with the spec (") + exit_rule_name(out->rule) + " at " +
               num(out->threshold) + ")");
  const double lo = out->rule == ExitRule::kPatience ? 1.0 : 0.0;
  const double hi = out->rule == ExitRule::kPatience ? static_cast<double>(out->exits.size()) : 1.0;
  const json::Value* range = rule->get("range");
  if (range == nullptr || !range->is_array() || range->as_array().size() != 2 || !range->as_array()[0].is_number() ||
      !range->as_array()[1].is_number() || range->as_array()[0].as_number() != lo ||
      range->as_array()[1].as_number() != hi)
    return bad("rule range should be [" + num(lo) + ", " + num(hi) + "]");
  const json::Value* mask_bias = d->get("mask_bias");
  if (mask_bias == nullptr || !mask_bias->is_number() || !(mask_bias->as_number() <= -1e4))
    return bad("mask_bias must be a large negative number");
  out->mask_bias = mask_bias->as_number();
  out->present = true;
  return true;
}

}  // namespace edgenlp
