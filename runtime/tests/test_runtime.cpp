// Unit tests of the native runtime internals and C API. No framework: each
// CHECK prints the failing expression; the exit status is the failure count.
//
//   edgenlp_tests [BUNDLE_DIR]     BUNDLE_DIR enables the model tests
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dynamic.h"
#include "edgenlp.h"
#include "json.h"
#include "sha256.h"
#include "unicode.h"
#include "utf8.h"
#include "wordpiece.h"

namespace {

int g_failures = 0;
int g_checks = 0;

#define CHECK(cond)                                                           \
  do {                                                                        \
    ++g_checks;                                                               \
    if (!(cond)) {                                                            \
      ++g_failures;                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                         \
  } while (0)

void test_sha256() {
  edgenlp::Sha256 a;
  CHECK(a.hex_digest() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  edgenlp::Sha256 b;
  b.update("abc", 3);
  CHECK(b.hex_digest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 1,000,000 x 'a' fed in uneven pieces crosses every block boundary case.
  edgenlp::Sha256 c;
  std::string chunk(997, 'a');
  std::size_t left = 1000000;
  while (left > 0) {
    const std::size_t n = std::min(left, chunk.size());
    c.update(chunk.data(), n);
    left -= n;
  }
  CHECK(c.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every SHA-256 implementation the CPU can run gives the scalar reference's
// digest: odd lengths around block and padding boundaries, unaligned starts
// and uneven update() pieces.
void test_sha256_impls() {
  const std::vector<edgenlp::Sha256Impl> impls = edgenlp::sha256_impls();
  CHECK(!impls.empty() && std::strcmp(impls.front().name, "scalar") == 0);
  std::printf("sha256 implementations:");
  for (const auto& impl : impls) std::printf(" %s", impl.name);
  std::printf(" (default %s)\n", edgenlp::sha256_default_impl().name);
  std::vector<std::uint8_t> data(200003);
  std::uint32_t x = 2463534242u;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b = static_cast<std::uint8_t>(x >> 11);
  }
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (std::size_t n : {447u, 511u, 1023u, 4095u, 4097u, 65537u, 131071u, 199999u}) lengths.push_back(n);
  const std::size_t pieces[] = {1, 3, 55, 63, 64, 65, 127, 1000, 1u << 30};
  auto digest = [&](edgenlp::Sha256Compress fn, std::size_t off, std::size_t n, std::size_t piece) {
    edgenlp::Sha256 h(fn);
    for (std::size_t done = 0; done < n;) {
      const std::size_t take = std::min(piece, n - done);
      h.update(data.data() + off + done, take);
      done += take;
    }
    return h.hex_digest();
  };
  for (const auto& impl : impls) {
    int bad = 0;
    for (std::size_t n : lengths) {
      for (std::size_t off : {0u, 1u, 3u}) {
        const std::string want = digest(&edgenlp::sha256_compress_scalar, off, n, n + 1);
        for (std::size_t piece : pieces) {
          if (n > 4096 && piece < 55) continue;  // the long inputs only in large pieces
          if (digest(impl.compress, off, n, piece) != want) ++bad;
        }
      }
    }
    if (bad != 0) std::fprintf(stderr, "sha256 %s: %d digests differ from scalar\n", impl.name, bad);
    CHECK(bad == 0);
    edgenlp::Sha256 abc(impl.compress);
    abc.update("abc", 3);
    CHECK(abc.hex_digest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // FIPS 180-2, 2 blocks
    edgenlp::Sha256 t(impl.compress);
    t.update(two.data(), two.size());
    CHECK(t.hex_digest() == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  }
}

void test_json() {
  edgenlp::json::Value v;
  std::string err;
  CHECK(edgenlp::json::parse(R"({"a": [1, 2.5e1, -3], "b": {"c": "x\u00e9\ud83d\ude00"}, "d": null, "e": true})", &v, &err));
  CHECK(v.get("a")->as_array().size() == 3);
  CHECK(v.get("a")->as_array()[1].as_number() == 25.0);
  CHECK(v.get("b")->get("c")->as_string() == "x\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.get("d")->is_null());
  CHECK(v.get("e")->as_bool());
  const char* bad[] = {"", "{", "[1,]", "{\"a\" 1}", "01", "\"\\ud800\"", "[1] x", "\"a\nb\"", "nul", "-", "1.", "{\"a\":}"};
  for (const char* b : bad) CHECK(!edgenlp::json::parse(b, &v, &err));
  std::string deep(100000, '[');
  CHECK(!edgenlp::json::parse(deep, &v, &err));  // depth limit, no stack overflow
}

void test_utf8() {
  std::vector<char32_t> cps;
  std::size_t bad = 0;
  CHECK(edgenlp::utf8::decode("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10, &cps, &bad));
  CHECK(cps.size() == 4 && cps[3] == 0x1F600);
  const char* invalid[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "\xc3", "\x80"};
  for (const char* s : invalid) CHECK(!edgenlp::utf8::decode(s, std::strlen(s), &cps, &bad));
}

void test_unicode() {
  char32_t out[4];
  CHECK(edgenlp::unicode::nfd(0xE9, out) == 2 && out[0] == 'e' && out[1] == 0x301);
  CHECK(edgenlp::unicode::nfd(0xAC01, out) == 3);  // Hangul syllable with final consonant
  CHECK(edgenlp::unicode::lower(0x130, out) == 2 && out[0] == 'i' && out[1] == 0x307);
  CHECK(edgenlp::unicode::lower(0x391, out) == 1 && out[0] == 0x3B1);
  CHECK(edgenlp::unicode::is_mark(0x301));
  CHECK(edgenlp::unicode::is_punct(0x3002) && edgenlp::unicode::is_punct('!'));
  CHECK(edgenlp::unicode::is_space(0x3000) && !edgenlp::unicode::is_space(0x200B));
  CHECK(edgenlp::unicode::is_drop(0x200B) && edgenlp::unicode::is_drop(0) && !edgenlp::unicode::is_drop('\t'));
  CHECK(edgenlp::unicode::is_cjk(0x4E2D) && !edgenlp::unicode::is_cjk(0x3042));
}

void test_wordpiece() {
  const std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nun\n##aff\n##able\nhello\n,\nworld\n!\n\xe4\xb8\xad\ncafe\n";
  edgenlp::WordPiece wp;
  std::string err;
  CHECK(wp.load_from_string(vocab, edgenlp::WordPieceConfig{}, &err));
  std::vector<std::int64_t> ids;
  CHECK(wp.encode("UNaffable Hello,WORLD! Caf\xc3\xa9 \xe4\xb8\xad", 64, &ids, &err) == edgenlp::TokenizeResult::kOk);
  const std::vector<std::int64_t> want = {2, 4, 5, 6, 7, 8, 9, 10, 12, 11, 3};
  CHECK(ids == want);
  CHECK(wp.encode("", 64, &ids, &err) == edgenlp::TokenizeResult::kOk);
  CHECK((ids == std::vector<std::int64_t>{2, 3}));
  CHECK(wp.encode("hello hello hello hello", 4, &ids, &err) == edgenlp::TokenizeResult::kOk);
  CHECK((ids == std::vector<std::int64_t>{2, 7, 7, 3}));
  CHECK(wp.encode("zzz", 8, &ids, &err) == edgenlp::TokenizeResult::kOk);
  CHECK((ids == std::vector<std::int64_t>{2, 1, 3}));
  CHECK(wp.encode("bad \xff", 8, &ids, &err) == edgenlp::TokenizeResult::kInvalidUtf8);
  CHECK(!wp.load_from_string("a\nb\n", edgenlp::WordPieceConfig{}, &err));  // no special tokens
  std::string big(100000, 'x');
  CHECK(wp.encode(big, 128, &ids, &err) == edgenlp::TokenizeResult::kOk && ids.size() == 3);
}

// The dynamic-bundle decisions against values of edgenlp.dynamic.rules (numpy).
void test_dynamic_rules() {
  using edgenlp::TokenMode;
  std::vector<std::size_t> keep;
  auto kept = [&](std::vector<float> imp, TokenMode mode, double th, double ratio) {
    edgenlp::keep_tokens(imp.data(), imp.size(), mode, th, ratio, &keep);
    return keep;
  };
  using V = std::vector<std::size_t>;
  // keep: the most important, ties to the earlier token; [CLS] and [SEP] always, in order
  CHECK((kept({5, 1, 1, 1, 1, 0}, TokenMode::kKeep, 0, 0.5) == V{0, 1, 5}));
  CHECK((kept({0, 2, 2, 3, 2, 0.5f}, TokenMode::kKeep, 0, 0.5) == V{0, 3, 5}));
  CHECK((kept({0, 2, 2, 3, 2, 0.5f}, TokenMode::kKeep, 0, 0.01) == V{0, 5}));
  CHECK((kept({0, 2, 2, 3, 2, 0.5f}, TokenMode::kKeep, 0, 1.0) == V{0, 1, 2, 3, 4, 5}));
  const float nan = std::nanf("");
  CHECK((kept({nan, 1, nan, 2, 1, 0}, TokenMode::kKeep, 0, 0.5) == V{0, 3, 5}));  // NaN sorts last
  // ltp: importance >= float32(threshold)
  CHECK((kept({0.1f, 0.3f, 0.29999998f, 0.31f, 0.2f}, TokenMode::kLtp, 0.3, 1.0) == V{0, 1, 3, 4}));
  CHECK((kept({0.1f, 0.3f, 0.2f}, TokenMode::kLtp, 5.0, 1.0) == V{0, 2}));
  CHECK((kept({9, 9}, TokenMode::kLtp, 50.0, 1.0) == V{0, 1}));
  CHECK((kept({0, 0, 0}, TokenMode::kNone, 0, 0.1) == V{0, 1, 2}));
  CHECK(edgenlp::keep_count(7, 0.3) == 3 && edgenlp::keep_count(10, 0.3) == 3 && edgenlp::keep_count(3, 0.1) == 2);
  CHECK(edgenlp::keep_count(1, 0.5) == 1 && edgenlp::keep_count(10, 0.7) == 7);
  // buckets: the smallest that holds n
  const std::vector<std::size_t> buckets = {8, 16, 32};
  CHECK(edgenlp::smallest_bucket(buckets, 2) == 0 && edgenlp::smallest_bucket(buckets, 8) == 0);
  CHECK(edgenlp::smallest_bucket(buckets, 9) == 1 && edgenlp::smallest_bucket(buckets, 16) == 1);
  CHECK(edgenlp::smallest_bucket(buckets, 32) == 2 && edgenlp::smallest_bucket(buckets, 33) == 3);
  // np.sum's pairwise order (a left-to-right sum gives 1e16 and 0)
  std::vector<double> a(9, 1.0);
  a[0] = 1e16;
  CHECK(edgenlp::pairwise_sum(a.data(), a.size()) == 1.0000000000000008e16);
  std::vector<double> b(202, 1.0);
  b[0] = 1e16;
  b[201] = -1e16;
  CHECK(edgenlp::pairwise_sum(b.data(), b.size()) == 188.0);
  // exit scores (to rounding: exp/log of another libm may differ in the last bit)
  const float z[3] = {1, 2, 3};
  auto near = [](double x, double y) { return std::fabs(x - y) <= 1e-14 * std::fabs(y); };
  CHECK(near(edgenlp::exit_confidence(edgenlp::ExitRule::kMaxProb, z, 3), 0.6652409557748218));
  CHECK(near(edgenlp::exit_confidence(edgenlp::ExitRule::kEntropy, z, 3), 0.7576791106615822));
  const float flat[2] = {0, 0};
  CHECK(near(edgenlp::exit_confidence(edgenlp::ExitRule::kEntropy, flat, 2), 1.0));
  // patience: argmax (first on ties) agreeing this many exits in a row
  const float e1[2] = {1, 0}, e2[2] = {0, 1}, tie[2] = {0, 0};
  edgenlp::ExitState two(edgenlp::ExitRule::kPatience, 2);
  CHECK(!two.fires(e1, 2) && !two.fires(e2, 2) && two.fires(e2, 2));
  edgenlp::ExitState one(edgenlp::ExitRule::kPatience, 1);
  CHECK(one.fires(tie, 2));
  edgenlp::ExitState maxprob(edgenlp::ExitRule::kMaxProb, 0.6652409557748218 - 1e-9);
  CHECK(maxprob.fires(z, 3));
  edgenlp::ExitState entropy(edgenlp::ExitRule::kEntropy, 0.75);
  CHECK(!entropy.fires(z, 3));
  const float nans[3] = {1, nan, 3};
  CHECK(edgenlp::argmax_first(nans, 3) == 1 && edgenlp::argmax_first(z, 3) == 2);
  CHECK(edgenlp::check_threshold(edgenlp::ExitRule::kPatience, 2.5, 3).find("integer from 1 to 3") != std::string::npos);
  CHECK(edgenlp::check_threshold(edgenlp::ExitRule::kPatience, 3, 3).empty());
  CHECK(!edgenlp::check_threshold(edgenlp::ExitRule::kMaxProb, 1.5, 3).empty());
  CHECK(!edgenlp::check_threshold(edgenlp::ExitRule::kEntropy, std::nan(""), 3).empty());
  CHECK(edgenlp::check_keep_ratio(1.0).empty() && !edgenlp::check_keep_ratio(0.0).empty());
}

void test_c_api_errors() {
  edgenlp_handle* h = nullptr;
  CHECK(edgenlp_open("/nonexistent/bundle", &h) == EDGENLP_ERR_IO);
  CHECK(h != nullptr && std::strlen(edgenlp_last_error(h)) > 0);
  int64_t ids[4];
  std::size_t n = 0;
  CHECK(edgenlp_tokenize(h, "x", 1, ids, nullptr, 4, &n) != EDGENLP_OK);
  float probs[2];
  CHECK(edgenlp_classify(h, "x", 1, probs, 2, nullptr) != EDGENLP_OK);
  edgenlp_close(h);
  CHECK(edgenlp_open(nullptr, nullptr) == EDGENLP_ERR_INVALID_ARGUMENT);
  CHECK(edgenlp_open(nullptr, &h) == EDGENLP_ERR_INVALID_ARGUMENT);
  edgenlp_close(h);
  edgenlp_close(nullptr);
  CHECK(edgenlp_version() == EDGENLP_VERSION);
  CHECK(std::strcmp(edgenlp_status_string(EDGENLP_ERR_CHECKSUM), "checksum mismatch") == 0);
}

void test_bundle(const char* dir) {
  edgenlp_handle* h = nullptr;
  const edgenlp_status st = edgenlp_open(dir, &h);
  CHECK(st == EDGENLP_OK);
  if (st != EDGENLP_OK) {
    std::fprintf(stderr, "open %s: %s\n", dir, edgenlp_last_error(h));
    edgenlp_close(h);
    return;
  }
  std::size_t k = 0;
  CHECK(edgenlp_num_labels(h, &k) == EDGENLP_OK && k >= 2);
  std::vector<float> probs(k);
  int32_t label = -1;
  const char* text = "a gripping, funny film";
  CHECK(edgenlp_classify(h, text, std::strlen(text), probs.data(), k, &label) == EDGENLP_OK);
  float sum = 0;
  for (float p : probs) sum += p;
  CHECK(sum > 0.999f && sum < 1.001f);
  CHECK(label >= 0 && static_cast<std::size_t>(label) < k);
  CHECK(edgenlp_label_name(h, static_cast<std::size_t>(label)) != nullptr);
  CHECK(edgenlp_label_name(h, k) == nullptr);
  CHECK(edgenlp_classify(h, text, std::strlen(text), probs.data(), k - 1, &label) == EDGENLP_ERR_BUFFER_TOO_SMALL);
  CHECK(edgenlp_classify(h, "\xc3(", 2, probs.data(), k, &label) == EDGENLP_ERR_INVALID_UTF8);
  CHECK(edgenlp_classify(h, "", 0, probs.data(), k, &label) == EDGENLP_OK);
  std::string big(100000, 'w');
  for (std::size_t i = 0; i < big.size(); i += 6) big[i] = ' ';
  CHECK(edgenlp_classify(h, big.data(), big.size(), probs.data(), k, &label) == EDGENLP_OK);
  // batch equals one by one
  const char* texts[3] = {"good", "bad movie", "an utterly forgettable, tedious mess"};
  const std::size_t lens[3] = {4, 9, std::strlen(texts[2])};
  std::vector<float> batch(3 * k), one(k);
  CHECK(edgenlp_logits_batch(h, texts, lens, 3, batch.data(), batch.size()) == EDGENLP_OK);
  CHECK(edgenlp_set_threads(h, 2) == EDGENLP_OK);
  CHECK(edgenlp_set_threads(h, 0) == EDGENLP_ERR_INVALID_ARGUMENT);
  for (int i = 0; i < 3; ++i) {
    CHECK(edgenlp_logits_batch(h, &texts[i], &lens[i], 1, one.data(), k) == EDGENLP_OK);
    for (std::size_t j = 0; j < k; ++j) CHECK(std::abs(one[j] - batch[i * k + j]) < 1e-4f);
  }
  // a static bundle: the dynamic options are refused, edgenlp_classify_dynamic without them is edgenlp_classify
  std::size_t layers = 99;
  CHECK(edgenlp_dynamic_layers(h, &layers) == EDGENLP_OK && layers == 0);
  CHECK(edgenlp_set_exit_threshold(h, 0.5) == EDGENLP_ERR_NOT_DYNAMIC);
  CHECK(std::strstr(edgenlp_last_error(h), "no segments") != nullptr);
  CHECK(edgenlp_set_keep_ratio(h, 0.5) == EDGENLP_ERR_NOT_DYNAMIC);
  CHECK(edgenlp_set_static(h, 1) == EDGENLP_ERR_NOT_DYNAMIC);
  std::vector<float> dyn(k);
  int32_t exit_layer = -1, dyn_label = -1;
  CHECK(edgenlp_classify(h, text, std::strlen(text), probs.data(), k, &label) == EDGENLP_OK);
  CHECK(edgenlp_classify_dynamic(h, text, std::strlen(text), EDGENLP_DEFAULT, EDGENLP_DEFAULT, EDGENLP_DEFAULT,
                                 dyn.data(), k, &dyn_label, &exit_layer, nullptr, 0) == EDGENLP_OK);
  CHECK(exit_layer == 0 && dyn_label == label && dyn == probs);
  CHECK(edgenlp_classify_dynamic(h, text, std::strlen(text), 0.5, EDGENLP_DEFAULT, EDGENLP_DEFAULT, dyn.data(), k,
                                 nullptr, nullptr, nullptr, 0) == EDGENLP_ERR_NOT_DYNAMIC);
  CHECK(edgenlp_logits_dynamic(h, text, std::strlen(text), EDGENLP_DEFAULT, EDGENLP_DEFAULT, 1, dyn.data(), k,
                               nullptr, nullptr, 0) == EDGENLP_ERR_NOT_DYNAMIC);
  CHECK(edgenlp_logits_dynamic(h, text, std::strlen(text), EDGENLP_DEFAULT, EDGENLP_DEFAULT, EDGENLP_DEFAULT,
                               dyn.data(), k - 1, nullptr, nullptr, 0) == EDGENLP_ERR_BUFFER_TOO_SMALL);
  CHECK(edgenlp_dynamic_layers(nullptr, &layers) == EDGENLP_ERR_INVALID_ARGUMENT);
  edgenlp_close(h);

  // open_ex: unknown flags are rejected; skip-verify and load-all give the same results
  CHECK(edgenlp_open_ex(dir, 0x80u, &h) == EDGENLP_ERR_INVALID_ARGUMENT);
  CHECK(std::strstr(edgenlp_last_error(h), "unknown") != nullptr);
  edgenlp_close(h);
  for (std::uint32_t flags : {EDGENLP_OPEN_SKIP_VERIFY, EDGENLP_OPEN_LOAD_ALL_METHODS,
                              EDGENLP_OPEN_SKIP_VERIFY | EDGENLP_OPEN_LOAD_ALL_METHODS}) {
    h = nullptr;
    CHECK(edgenlp_open_ex(dir, flags, &h) == EDGENLP_OK);
    std::vector<float> again(3 * k);
    CHECK(edgenlp_logits_batch(h, texts, lens, 3, again.data(), again.size()) == EDGENLP_OK);
    for (std::size_t j = 0; j < again.size(); ++j) CHECK(std::abs(again[j] - batch[j]) < 1e-4f);
    edgenlp_close(h);
  }
}

}  // namespace

int main(int argc, char** argv) {
  test_sha256();
  test_sha256_impls();
  test_json();
  test_utf8();
  test_unicode();
  test_wordpiece();
  test_dynamic_rules();
  test_c_api_errors();
  if (argc > 1) test_bundle(argv[1]);
  std::printf("%d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
