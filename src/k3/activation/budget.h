// Predicting the activation memory of a step from its profile, and budget mode: choosing
// policies that fit a memory budget at the least predicted extra time.
//
// The model of memory (what ActivationManager does): the step arena peaks at `arena_peak` (the
// stream between segments and one segment's scratch, measured) plus the segments it holds (those
// whose tensors are all kept, left in the arena until the step's end); the manager's pool holds
// the kept tensors of the other segments and what is stored in fp8 from the forward until each
// segment's backward is done; before that backward it also holds the segment's restored tensors
// (decoded, fetched or recomputed: f32), and the offloaded tensors of the segment the backward
// reaches next, fetched ahead.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "k3/activation/manager.h"

namespace k3::activation {

struct StepCosts {
  // The arena's peak without the segments it holds: measured with every segment recomputed, or a
  // step's peak less what held_in_arena says that step held.
  size_t arena_peak = 0;
  double copy_bytes_per_second = 0;  // memory copy bandwidth, for the cost of offloading
  int in_flight = 1;               // micro-batches holding saved tensors at once
};

struct Prediction {
  size_t peak = 0;          // arena_peak + arena_held + the pool's peak
  size_t arena_held = 0;    // segments held in the arena, all micro-batches in flight
  size_t pool_peak = 0;
  size_t offloaded = 0;     // bytes held by the offload store
  double extra_seconds = 0;  // recompute forwards + offload transfers (not hidden)
};

Prediction predict(const std::vector<SegmentProfile>& segments, const PolicyRules& rules,
                   const StepCosts& costs);
// The arena one micro-batch's segments hold under `rules` (those whose tensors are all kept).
size_t held_in_arena(const std::vector<SegmentProfile>& segments, const PolicyRules& rules);

struct BudgetPlan {
  PolicyRules rules;      // the fixed rules first, then one rule per tensor the plan placed
  Prediction prediction;
  int segments_recomputed = 0, segments_offloaded = 0;
};

// Every tensor no rule of `fixed` matches starts as keep; segment by segment, the cheapest per
// byte of recompute (its measured forward) and offload (the copies out and back) is taken until
// the prediction fits `budget`; if every segment is placed and it still does not, offloaded
// segments turn to recompute (which holds no tensors fetched ahead). A budget that cannot be met
// even so is refused in one line naming activation.budget and the least that would work.
BudgetPlan plan_budget(const std::vector<SegmentProfile>& segments,
                       const std::vector<PolicyRule>& fixed, const StepCosts& costs,
                       size_t budget);

}  // namespace k3::activation
