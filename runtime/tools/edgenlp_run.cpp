// edgenlp-run: classify texts with a bundle, benchmark it, tokenize, write an ETDump.
//
//   edgenlp-run BUNDLE "text" ["text" ...]         label and probabilities
//   edgenlp-run BUNDLE --json "text"               one JSON object per text (with "ms": time of the classify call)
//   edgenlp-run BUNDLE --input FILE                texts from FILE, one per line
//   edgenlp-run BUNDLE --tokenize "text"           token ids, one line per text
//   edgenlp-run BUNDLE --bench 50 --seq-len 128 --threads 2
//                                                  latency median/p90, cold start, peak RSS as JSON
//   edgenlp-run BUNDLE --etdump run.etdp "text"    also write an ExecuTorch ETDump
//   --no-verify      skip the sha256 check of the bundle files (EDGENLP_OPEN_SKIP_VERIFY)
//   --load-all       load every method at open (EDGENLP_OPEN_LOAD_ALL_METHODS)
//   --no-weight-cache  one packed weight copy per method (EDGENLP_OPEN_NO_WEIGHT_CACHE)
//   Dynamic bundles run segment by segment (early exits, token pruning); --json adds
//   "exit_layer" and "tokens_kept" (tokens per layer that ran). On them:
//   --static         every layer on every token (the static methods)
//   --exit-threshold X  the exit threshold (maxprob/entropy in [0, 1], patience 1..exits)
//   --keep R         keep this fraction of the tokens after each token layer, in (0, 1]
//
// Exit status: 0 success, 2 bad usage or input (bundle, text), 1 runtime failure.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "edgenlp.h"

namespace {

const char* kUsage =
    "usage: edgenlp-run BUNDLE [TEXT ...] [--input FILE] [--json] [--tokenize] [--threads T]\n"
    "                   [--bench N --seq-len L [--warmup W]] [--etdump FILE] [--no-verify] [--load-all]\n"
    "                   [--no-weight-cache] [--static] [--exit-threshold X] [--keep R]\n";

struct Options {
  std::string bundle;
  std::vector<std::string> texts;
  std::string input;
  bool json = false;
  bool tokenize = false;
  int threads = 0;
  long bench = 0;
  long seq_len = 0;
  long warmup = 3;
  std::string etdump;
  uint32_t open_flags = EDGENLP_OPEN_DEFAULT;
  bool is_static = false;
  double exit_threshold = EDGENLP_DEFAULT;
  double keep = EDGENLP_DEFAULT;
};

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "edgenlp-run: error: %s\n", msg.c_str());
  std::exit(code);
}

long parse_long(const char* flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || r < lo || r > hi)
    die(2, std::string(flag) + " expects an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" +
               v + "'");
  return r;
}

double parse_double(const char* flag, const char* v) {
  char* end = nullptr;
  const double r = std::strtod(v, &end);
  if (end == v || *end != '\0') die(2, std::string(flag) + " expects a number, got '" + v + "'");
  return r;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) die(2, a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--no-verify") {
      o.open_flags |= EDGENLP_OPEN_SKIP_VERIFY;
    } else if (a == "--load-all") {
      o.open_flags |= EDGENLP_OPEN_LOAD_ALL_METHODS;
    } else if (a == "--no-weight-cache") {
      o.open_flags |= EDGENLP_OPEN_NO_WEIGHT_CACHE;
    } else if (a == "--static") {
      o.is_static = true;
    } else if (a == "--exit-threshold") {
      o.exit_threshold = parse_double("--exit-threshold", value());
    } else if (a == "--keep") {
      o.keep = parse_double("--keep", value());
    } else if (a == "--tokenize") {
      o.tokenize = true;
    } else if (a == "--input") {
      o.input = value();
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_long("--threads", value(), 1, 1024));
    } else if (a == "--bench") {
      o.bench = parse_long("--bench", value(), 1, 100000000);
    } else if (a == "--seq-len") {
      o.seq_len = parse_long("--seq-len", value(), 2, 1000000);
    } else if (a == "--warmup") {
      o.warmup = parse_long("--warmup", value(), 0, 1000000);
    } else if (a == "--etdump") {
      o.etdump = value();
    } else if (a == "--") {
      for (++i; i < argc; ++i) o.texts.emplace_back(argv[i]);
    } else if (a.size() > 1 && a[0] == '-' && a[1] == '-') {
      die(2, "unknown option " + a + " (see --help)");
    } else if (o.bundle.empty()) {
      o.bundle = a;
    } else {
      o.texts.push_back(a);
    }
  }
  if (o.bundle.empty()) die(2, "missing BUNDLE (see --help)");
  if (!o.input.empty()) {
    std::ifstream in(o.input, std::ios::binary);
    if (!in) die(2, "cannot read --input " + o.input);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      o.texts.push_back(line);
    }
  }
  if (o.bench == 0 && o.texts.empty()) die(2, "no TEXT given (see --help)");
  if (o.bench > 0 && o.seq_len == 0) die(2, "--bench needs --seq-len");
  if (o.is_static && (o.exit_threshold != EDGENLP_DEFAULT || o.keep != EDGENLP_DEFAULT))
    die(2, "--static runs every layer and token: give it without --exit-threshold or --keep");
  return o;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out;
}

int exit_code(edgenlp_status st) {
  switch (st) {
    case EDGENLP_ERR_MODEL:
    case EDGENLP_ERR_OUT_OF_MEMORY:
    case EDGENLP_ERR_INTERNAL:
      return 1;
    default:
      return 2;
  }
}

// RAII owner of a handle.
struct Handle {
  edgenlp_handle* h = nullptr;
  size_t layers = 0;  // > 0: a dynamic bundle, run segment by segment
  std::vector<int32_t> tokens;
  int32_t exit_layer = 0;
  ~Handle() { edgenlp_close(h); }
  void check(edgenlp_status st) const {
    if (st != EDGENLP_OK) die(exit_code(st), edgenlp_last_error(h));
  }
  // The dynamic options (an error on a bundle without segments).
  void configure(const Options& o) {
    check(edgenlp_dynamic_layers(h, &layers));
    tokens.assign(layers, 0);
    if (o.is_static) check(edgenlp_set_static(h, 1));
    if (o.exit_threshold != EDGENLP_DEFAULT) check(edgenlp_set_exit_threshold(h, o.exit_threshold));
    if (o.keep != EDGENLP_DEFAULT) check(edgenlp_set_keep_ratio(h, o.keep));
  }
  // One text: through the segments of a dynamic bundle, else the static methods.
  void classify(const std::string& t, float* probs, size_t k, int32_t* label) {
    if (layers == 0) {
      check(edgenlp_classify(h, t.data(), t.size(), probs, k, label));
      return;
    }
    check(edgenlp_classify_dynamic(h, t.data(), t.size(), EDGENLP_DEFAULT, EDGENLP_DEFAULT, EDGENLP_DEFAULT, probs,
                                   k, label, &exit_layer, tokens.data(), tokens.size()));
  }
};

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

long peak_rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// A text that tokenizes to exactly `target` tokens ([CLS] + target-2 words + [SEP]).
std::string text_of_length(Handle& h, long target) {
  std::string text;
  for (long i = 0; i < target - 2; ++i) text += i ? " a" : "a";
  std::vector<int64_t> ids(static_cast<std::size_t>(target) + 8);
  size_t n = 0;
  h.check(edgenlp_tokenize(h.h, text.data(), text.size(), ids.data(), nullptr, ids.size(), &n));
  if (static_cast<long>(n) != target)
    die(2, "--seq-len " + std::to_string(target) + " is above the bundle's max_seq_len (" + std::to_string(n) +
               " tokens)");
  return text;
}

int bench(const Options& o) {
  Handle h;
  const double t0 = now_ms();
  h.check(edgenlp_open_ex(o.bundle.c_str(), o.open_flags, &h.h));
  if (o.threads > 0) h.check(edgenlp_set_threads(h.h, o.threads));
  h.configure(o);
  const double t_open = now_ms();
  const std::string text = text_of_length(h, o.seq_len);
  size_t k = 0;
  h.check(edgenlp_num_labels(h.h, &k));
  std::vector<float> probs(k);
  int32_t label = 0;
  h.classify(text, probs.data(), k, &label);
  const double t_first = now_ms();
  for (long i = 0; i < o.warmup; ++i) h.classify(text, probs.data(), k, &label);
  std::vector<double> lat;
  lat.reserve(static_cast<std::size_t>(o.bench));
  for (long i = 0; i < o.bench; ++i) {
    const double s = now_ms();
    h.classify(text, probs.data(), k, &label);
    lat.push_back(now_ms() - s);
  }
  double mean = 0;
  for (double v : lat) mean += v;
  mean /= static_cast<double>(lat.size());
  std::printf(
      "{\"bundle\": \"%s\", \"seq_len\": %ld, \"threads\": %d, \"iterations\": %ld, \"warmup\": %ld, "
      "\"latency_ms\": {\"median\": %.4f, \"p90\": %.4f, \"mean\": %.4f, \"min\": %.4f, \"max\": %.4f}, "
      "\"open_ms\": %.3f, \"cold_start_ms\": %.3f, \"peak_rss_kb\": %ld}\n",
      json_escape(o.bundle).c_str(), o.seq_len, o.threads, o.bench, o.warmup, percentile(lat, 0.5),
      percentile(lat, 0.9), mean, *std::min_element(lat.begin(), lat.end()),
      *std::max_element(lat.begin(), lat.end()), t_open - t0, t_first - t0, peak_rss_kb());
  return 0;
}

int tokenize(const Options& o, Handle& h) {
  size_t max_len = 0;
  h.check(edgenlp_max_seq_len(h.h, &max_len));
  std::vector<int64_t> ids(max_len);
  for (const auto& t : o.texts) {
    size_t n = 0;
    h.check(edgenlp_tokenize(h.h, t.data(), t.size(), ids.data(), nullptr, ids.size(), &n));
    if (o.json) std::fputc('[', stdout);
    for (size_t i = 0; i < n; ++i) std::printf(o.json ? (i ? ", %lld" : "%lld") : (i ? " %lld" : "%lld"), static_cast<long long>(ids[i]));
    std::fputs(o.json ? "]\n" : "\n", stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (o.bench > 0) return bench(o);
  Handle h;
  h.check(edgenlp_open_ex(o.bundle.c_str(), o.open_flags, &h.h));
  if (o.tokenize) return tokenize(o, h);
  if (o.threads > 0) h.check(edgenlp_set_threads(h.h, o.threads));
  if (!o.etdump.empty()) h.check(edgenlp_enable_etdump(h.h));
  h.configure(o);
  size_t k = 0;
  h.check(edgenlp_num_labels(h.h, &k));
  std::vector<float> probs(k);
  for (const auto& t : o.texts) {
    int32_t label = 0;
    const double s = now_ms();
    h.classify(t, probs.data(), k, &label);
    const double ms = now_ms() - s;  // tokenize + run, as an app sees one call
    const size_t ran = h.layers > 0 ? static_cast<size_t>(h.exit_layer) : 0;
    if (o.json) {
      std::printf("{\"text\": \"%s\", \"label\": \"%s\", \"index\": %d, \"ms\": %.4f, \"probabilities\": {",
                  json_escape(t).c_str(), json_escape(edgenlp_label_name(h.h, static_cast<size_t>(label))).c_str(), label, ms);
      for (size_t i = 0; i < k; ++i)
        std::printf("%s\"%s\": %.6f", i ? ", " : "", json_escape(edgenlp_label_name(h.h, i)).c_str(), probs[i]);
      std::printf("}");
      if (h.layers > 0) {
        std::printf(", \"exit_layer\": %d, \"tokens_kept\": [", h.exit_layer);
        for (size_t i = 0; i < ran; ++i) std::printf(i ? ", %d" : "%d", h.tokens[i]);
        std::printf("]");
      }
      std::printf("}\n");
    } else {
      std::printf("%s", edgenlp_label_name(h.h, static_cast<size_t>(label)));
      for (size_t i = 0; i < k; ++i) std::printf("\t%s=%.4f", edgenlp_label_name(h.h, i), probs[i]);
      if (h.layers > 0) {
        std::printf("\texit_layer=%d\ttokens_kept=", h.exit_layer);
        for (size_t i = 0; i < ran; ++i) std::printf(i ? ",%d" : "%d", h.tokens[i]);
      }
      std::printf("\n");
    }
  }
  if (!o.etdump.empty()) h.check(edgenlp_write_etdump(h.h, o.etdump.c_str()));
  return 0;
}
