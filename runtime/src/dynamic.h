// Dynamic bundles: the manifest's "dynamic" section (segments, exits, token
// pruning) and the two decisions taken after a segment, in the exact
// arithmetic of the Python reference (edgenlp/dynamic/rules.py,
// edgenlp/run/dynamic.py) so that every runtime decides alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "json.h"

namespace edgenlp {

enum class ExitRule { kMaxProb, kEntropy, kPatience };
enum class TokenMode { kNone, kLtp, kKeep };

const char* exit_rule_name(ExitRule rule);

// One segment: layers first..last (1-based, inclusive), its outputs and one
// pte method per bucket (methods[i] runs at buckets[i]).
struct SegmentInfo {
  std::size_t first = 0;
  std::size_t last = 0;
  bool exit = false;    // returns logits after `last`
  bool tokens = false;  // returns each token's importance after `last`
  std::vector<std::string> methods;
  std::size_t num_outputs() const { return 1 + (exit ? 1 : 0) + (tokens ? 1 : 0); }
};

// The parsed, checked "dynamic" section (present = true for a dynamic bundle).
struct DynamicInfo {
  bool present = false;
  std::size_t num_layers = 0;
  std::size_t hidden = 0;
  std::size_t num_labels = 0;
  double mask_bias = 0.0;
  std::vector<std::size_t> buckets;         // ascending
  std::vector<std::string> embed_methods;   // one per bucket
  std::vector<SegmentInfo> segments;        // in execution order
  // the spec (edgenlp.dynamic.spec.DynamicSpec)
  std::vector<std::size_t> exits;           // ascending layer numbers, the last is num_layers
  ExitRule rule = ExitRule::kMaxProb;
  double threshold = 1.0;
  TokenMode tokens = TokenMode::kNone;
  std::vector<std::size_t> token_layers;
  std::vector<double> token_thresholds;     // per layer 1..L (ltp); NaN where none
  double keep_ratio = 1.0;
};

// Parse manifest["dynamic"] of a bundle whose labels, model shape and
// "artifacts" are in `manifest`. Returns false and sets *error ("dynamic: ...")
// when the section is malformed or inconsistent, with the checks of
// edgenlp.dynamic.manifest.DynamicEntry.from_manifest.
bool parse_dynamic(const json::Value& manifest, std::size_t num_labels, DynamicInfo* out, std::string* error);

// Index of the bucket that holds n tokens (the smallest >= n), or buckets.size() when none does.
std::size_t smallest_bucket(const std::vector<std::size_t>& buckets, std::size_t n);

// "" when `value` is a threshold of `rule` (maxprob/entropy in [0, 1],
// patience an integer in 1..num_exits), else the message saying why not.
std::string check_threshold(ExitRule rule, double value, std::size_t num_exits);
// "" when `value` is a keep ratio in (0, 1], else the message.
std::string check_keep_ratio(double value);

// The exit rule's state over one sentence: call fires() once per exit, in order.
class ExitState {
 public:
  ExitState(ExitRule rule, double threshold) : rule_(rule), threshold_(threshold) {}
  bool fires(const float* logits, std::size_t n);

 private:
  ExitRule rule_;
  double threshold_;
  std::int64_t previous_ = -1;
  std::int64_t streak_ = 0;
};

// The score maxprob / entropy compares with the threshold (probabilities in
// double from the float32 logits, sums in numpy's pairwise order).
double exit_confidence(ExitRule rule, const float* logits, std::size_t n);

// The sum of n doubles in numpy's pairwise order (what np.sum computes).
double pairwise_sum(const double* a, std::size_t n);

// numpy's argmax: the first maximum, or the first NaN.
std::size_t argmax_first(const float* v, std::size_t n);

// How many of n tokens a keep ratio keeps (never fewer than [CLS] and [SEP]).
std::size_t keep_count(std::size_t n, double ratio);

// Ascending indices of the tokens kept among n (first and last always):
// ltp keeps importance >= float32(threshold); keep the keep_count(n, ratio)
// most important, ties to the earlier token.
void keep_tokens(const float* importance, std::size_t n, TokenMode mode, double threshold, double ratio,
                 std::vector<std::size_t>* keep);

}  // namespace edgenlp
