#include "k3/activation/policy.h"

#include <string>

#include "k3/base/error.h"
#include "k3/base/strings.h"

namespace k3::activation {

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::Keep: return "keep";
    case Policy::Recompute: return "recompute";
    case Policy::Fp8: return "fp8";
    case Policy::Offload: return "offload";
    case Policy::Bf16: return "bf16";
  }
  return "?";
}

const char* policy_names() {
  static const std::string names = [] {
    std::string out;
    for (size_t i = 0; i < kNumPolicies; ++i)
      out += std::string(i == 0 ? "" : i + 1 == kNumPolicies ? " or " : ", ") +
             policy_name(kPolicies[i]);
    return out;
  }();
  return names.c_str();
}

std::optional<Policy> parse_policy(std::string_view name) {
  for (Policy p : kPolicies)
    if (name == policy_name(p)) return p;
  return std::nullopt;
}

std::vector<PolicyRule> PolicyRules::parse(const std::string& text, const std::string& field) {
  std::vector<PolicyRule> rules;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string rule = trim(std::string_view(text).substr(at, comma - at));
    at = comma + 1;
    if (rule.empty()) continue;
    const size_t eq = rule.find('=');
    K3_CHECK(eq != std::string::npos, field, ": rule \"", rule,
             "\": expected \"pattern=policy\" (e.g. \"*.*.mlp.*=recompute\")");
    const std::string pattern = trim(std::string_view(rule).substr(0, eq)),
                      name = trim(std::string_view(rule).substr(eq + 1));
    K3_CHECK(!pattern.empty(), field, ": rule \"", rule, "\": the pattern is empty");
    const std::optional<Policy> p = parse_policy(name);
    K3_CHECK(p, field, ": rule \"", rule, "\": unknown policy \"", name,
             "\" (expected ", policy_names(), ")");
    rules.push_back({pattern, *p});
  }
  return rules;
}

Policy PolicyRules::policy_of(std::string_view key, bool* by_rule) const {
  for (const PolicyRule& r : rules_)
    if (glob_match(r.pattern, key)) {
      if (by_rule) *by_rule = true;
      return r.policy;
    }
  if (by_rule) *by_rule = false;
  return fallback_;
}

}  // namespace k3::activation
