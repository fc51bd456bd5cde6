#include "k3/activation/budget.h"

#include <algorithm>
#include <limits>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/tensor/fp8_e4m3.h"

namespace k3::activation {
namespace {

size_t f32(int64_t n) { return BufferPool::pool_bytes(static_cast<size_t>(n) * sizeof(float)); }

// A tensor's effective policy, as ActivationManager::save decides it.
Policy effective(const TensorProfile& t, const PolicyRules& rules) {
  if (t.reference) return Policy::Keep;
  const Policy p = rules.policy_of(t.key);
  return lossy(p) && t.exact ? Policy::Keep : p;
}

// Whether the segment stays in the arena, as ActivationManager::Segment::in_arena decides it.
bool in_arena(const SegmentProfile& s, const PolicyRules& rules) {
  int kept = 0;
  for (const TensorProfile& t : s.tensors) {
    if (t.reference) continue;
    if (effective(t, rules) != Policy::Keep) return false;
    kept += 1;
  }
  return kept > 0;
}

}  // namespace

size_t held_in_arena(const std::vector<SegmentProfile>& segments, const PolicyRules& rules) {
  size_t held = 0;
  for (const SegmentProfile& s : segments)
    if (in_arena(s, rules)) held += s.arena_bytes;
  return held;
}

Prediction predict(const std::vector<SegmentProfile>& segments, const PolicyRules& rules,
                   const StepCosts& costs) {
  Prediction out;
  const size_t n = segments.size();
  std::vector<size_t> stored(n, 0), restored(n, 0), offloaded(n, 0);
  for (size_t s = 0; s < n; ++s) {
    if (in_arena(segments[s], rules)) continue;
    bool recompute = false;
    for (const TensorProfile& t : segments[s].tensors) {
      if (t.reference) continue;
      switch (effective(t, rules)) {
        case Policy::Keep: stored[s] += f32(t.floats); break;
        case Policy::Fp8:
          stored[s] += BufferPool::pool_bytes(fp8_block_bytes(t.floats));
          restored[s] += f32(t.floats);
          break;
        case Policy::Bf16:
          stored[s] += BufferPool::pool_bytes(static_cast<size_t>(t.floats) * sizeof(uint16_t));
          restored[s] += f32(t.floats);
          break;
        case Policy::Offload:
          restored[s] += f32(t.floats);
          offloaded[s] += f32(t.floats);
          break;
        case Policy::Recompute:
          restored[s] += f32(t.floats);
          recompute = true;
          break;
      }
    }
    if (recompute) out.extra_seconds += segments[s].forward_seconds;
    if (costs.copy_bytes_per_second > 0)
      out.extra_seconds += 2.0 * static_cast<double>(offloaded[s]) / costs.copy_bytes_per_second;
    out.offloaded += offloaded[s];
  }
  // End of the forward: everything stored. In the backward of segment s (last to first): what
  // segments up to s stored, s's restored tensors, and s - 1's offloaded ones, fetched ahead.
  size_t total = 0;
  for (size_t s = 0; s < n; ++s) total += stored[s];
  const size_t others = total * static_cast<size_t>(std::max(costs.in_flight, 1) - 1);
  size_t peak = total, upto = total;
  for (size_t s = n; s-- > 0;) {
    peak = std::max(peak, upto + restored[s] + (s > 0 ? offloaded[s - 1] : 0));
    upto -= stored[s];
  }
  const auto in_flight = static_cast<size_t>(std::max(costs.in_flight, 1));
  out.pool_peak = peak + others;
  out.offloaded *= in_flight;
  out.arena_held = held_in_arena(segments, rules) * in_flight;
  out.peak = costs.arena_peak + out.arena_held + out.pool_peak;
  return out;
}

BudgetPlan plan_budget(const std::vector<SegmentProfile>& segments,
                       const std::vector<PolicyRule>& fixed, const StepCosts& costs,
                       size_t budget) {
  const PolicyRules fixed_rules(Policy::Keep, fixed);
  // The tensors the plan may place: those no fixed rule matches.
  auto free_tensors = [&](const SegmentProfile& s) {
    std::vector<const TensorProfile*> out;
    for (const TensorProfile& t : s.tensors) {
      bool by_rule = false;
      fixed_rules.policy_of(t.key, &by_rule);
      if (!t.reference && !by_rule) out.push_back(&t);
    }
    return out;
  };
  std::vector<Policy> choice(segments.size(), Policy::Keep);
  auto rules_of = [&](const std::vector<Policy>& c) {
    std::vector<PolicyRule> rules = fixed;
    for (size_t s = 0; s < segments.size(); ++s)
      for (const TensorProfile* t : free_tensors(segments[s])) rules.push_back({t->key, c[s]});
    return PolicyRules(Policy::Keep, std::move(rules));
  };
  // The cheaper way to drop a segment's tensors, and its cost per byte dropped.
  auto option = [&](size_t s, Policy* p) {
    size_t bytes = 0;
    for (const TensorProfile* t : free_tensors(segments[s])) bytes += f32(t->floats);
    if (bytes == 0) return std::numeric_limits<double>::infinity();
    const double offload = costs.copy_bytes_per_second > 0
                               ? 2.0 * static_cast<double>(bytes) / costs.copy_bytes_per_second
                               : std::numeric_limits<double>::infinity();
    const double recompute = segments[s].forward_seconds;
    *p = offload < recompute ? Policy::Offload : Policy::Recompute;
    return std::min(offload, recompute) / static_cast<double>(bytes);
  };
  Prediction now = predict(segments, rules_of(choice), costs);
  while (now.peak > budget) {
    size_t best = segments.size();
    double best_cost = std::numeric_limits<double>::infinity();
    Policy best_policy = Policy::Keep;
    for (size_t s = 0; s < segments.size(); ++s) {
      Policy p = Policy::Keep;
      const double c = choice[s] == Policy::Keep ? option(s, &p) : best_cost;
      if (c < best_cost) {
        best = s;
        best_cost = c;
        best_policy = p;
      }
    }
    if (best == segments.size()) break;  // every segment placed
    choice[best] = best_policy;
    now = predict(segments, rules_of(choice), costs);
  }
  // Offloading holds the next segment's tensors too (fetched ahead): when every segment is
  // placed and the budget is still not met, offloaded segments turn to recompute, cheapest first.
  while (now.peak > budget) {
    size_t best = segments.size();
    for (size_t s = 0; s < segments.size(); ++s)
      if (choice[s] == Policy::Offload &&
          (best == segments.size() ||
           segments[s].forward_seconds < segments[best].forward_seconds))
        best = s;
    if (best == segments.size()) break;
    choice[best] = Policy::Recompute;
    now = predict(segments, rules_of(choice), costs);
  }
  if (now.peak > budget) {
    const Prediction all_recompute =
        predict(segments, rules_of(std::vector<Policy>(segments.size(), Policy::Recompute)), costs);
    const Prediction least = now.peak < all_recompute.peak ? now : all_recompute;
    throw Error("activation.budget " + format_bytes(static_cast<double>(budget)) +
                " is below the least this run can use: " +
                format_bytes(static_cast<double>(least.peak)) + " (" +
                std::to_string(least.peak) + " bytes, with every layer's tensors " +
                (now.peak < all_recompute.peak ? "recomputed or offloaded" : "recomputed") + ")");
  }
  BudgetPlan plan{rules_of(choice), now, 0, 0};
  for (Policy p : choice) {
    plan.segments_recomputed += p == Policy::Recompute;
    plan.segments_offloaded += p == Policy::Offload;
  }
  return plan;
}

}  // namespace k3::activation
