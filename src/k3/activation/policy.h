// How the activation manager holds one saved tensor, and the rules that choose it.
//
// A tensor saved inside a decoder layer has a class key "KIND.LAYER.ROLE": the layer's kind
// (kda, mla or gated_attention: its sequence mixer), its 0-based index, and its role, the name
// under the layer ("self_attn.q", "mlp.experts.gate", "input_layernorm.rstd", "P_in"). A rule is
// "pattern=policy"; the pattern matches the whole key, '*' standing for any run of characters.
// Rules are tried in order, the first match wins, and a key no rule matches takes the default.
//   keep       held as it is
//   recompute  dropped after the forward; the layer's forward runs again before its backward
//   fp8        stored as FP8 E4M3 with one scale per block of 128 values, decoded on load
//   offload    copied out (to host memory, or a peer rank's) and brought back before the backward
//   bf16       stored as bf16 (rounded to nearest even), decoded on load: half the bytes
// Some tensors are never stored lossily (under fp8 or bf16 they are kept): exact integers (routing
// ids, counts), copies of parameters, and the small statistics whose rounding the backward would
// amplify (norms' reciprocal RMS, attention's log-sum-exp, Attention Residuals' mixing weights,
// KDA's per-head scales and its chunks' recurrent states).
#pragma once

#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace k3::activation {

enum class Policy { Keep, Recompute, Fp8, Offload, Bf16 };
inline constexpr Policy kPolicies[] = {Policy::Keep, Policy::Recompute, Policy::Fp8,
                                       Policy::Offload, Policy::Bf16};
inline constexpr size_t kNumPolicies = std::size(kPolicies);

// The policies that store a rounded copy (never of an exact tensor).
inline bool lossy(Policy p) { return p == Policy::Fp8 || p == Policy::Bf16; }

const char* policy_name(Policy p);  // "keep", "recompute", "fp8", "offload", "bf16"
// "keep, recompute, fp8, offload or bf16", for the errors that list them
const char* policy_names();
std::optional<Policy> parse_policy(std::string_view name);

// What a recompute re-runs: a whole decoder layer (only its input is kept), or each half of it
// (the sequence mixer with its norm, the feed-forward with its norm; the stream between them is
// kept too, so recomputing one half never runs the other).
enum class Granularity { Layer, Sublayer };

struct PolicyRule {
  std::string pattern;
  Policy policy;
};

class PolicyRules {
 public:
  PolicyRules() = default;  // everything kept
  PolicyRules(Policy fallback, std::vector<PolicyRule> rules)
      : fallback_(fallback), rules_(std::move(rules)) {}
  // "pattern=policy, pattern=policy"; an error names `field` and the rule.
  static std::vector<PolicyRule> parse(const std::string& text, const std::string& field);

  // The policy of class key `key`; `by_rule` (when given) says whether a rule chose it.
  Policy policy_of(std::string_view key, bool* by_rule = nullptr) const;
  Policy fallback() const { return fallback_; }
  const std::vector<PolicyRule>& rules() const { return rules_; }

 private:
  Policy fallback_ = Policy::Keep;
  std::vector<PolicyRule> rules_;
};

}  // namespace k3::activation
