// What a run needs in memory, per rank and by part, before anything is allocated: the model's
// parameters, gradients and activations (model/memory_estimate.h) on the rank's place in the
// layout, the optimizer's state and workspace, the data; and what the machine has for it. The
// pre-flight checks hold a run to it, and `k3lab plan` sizes GPU runs with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/model/memory_estimate.h"
#include "k3/model/model.h"
#include "k3/optim/param_groups.h"
#include "k3/parallel/pipeline/schedule.h"
#include "k3/train/config/run_config.h"

namespace k3::train {

// Bytes a run needs at its peak, by part.
struct RunMemory {
  model::ModelMemory model;        // parameters, gradients, one micro-batch's activations
  double optimizer_state = 0;      // AdamW m and v, Muon momentum: fp32, per trained value
  double optimizer_workspace = 0;  // Muon's packed blocks and Newton-Schulz scratch
  double data = 0;                 // the dataset's token streams (int32)
  int64_t adamw_values = 0, muon_values = 0, frozen_values = 0;
  model::ActivationLayout layout;  // the rank the estimate is for
  int pp_rank = 0;
  std::string layout_text;  // the run's grid and policy, for describe()
  double total() const;
};

// Which optimizer updates each parameter: train.optim_rules, then train.optimizer's defaults.
// Throws naming a tensor no rule covers or a rule that does not parse.
std::vector<optim::Assignment> optimizer_plan(const std::vector<optim::ParamSlot>& slots,
                                              const model::ModelConfig& mc,
                                              const TrainSection& train);

// The pipeline schedule the run's layout and batch make (the kind, pp, vp, micro-batches).
parallel::pipeline::ScheduleShape schedule_shape(const RunConfig& config,
                                                 const model::ModelConfig& mc);

// The place of pipeline rank PP_RANK in the run's layout, for the activation estimate: its
// micro-batch (batch_size / (dp·ep) rows of seq_len / cp tokens), its pipeline chunks and the
// micro-batch chunks the schedule holds in flight there (Timeline::peak_in_flight), its tp, cp
// and ep groups, and the activation policy (with rules, the one holding the most; a budget).
model::ActivationLayout activation_layout(const RunConfig& config, const model::ModelConfig& mc,
                                          int pp_rank);

// One rank's memory: `described` is that rank's registry (tp, ep and pp places), constructed
// without allocation. data_tokens: both splits together.
RunMemory estimate_run_memory(const model::Model& described, const RunConfig& config,
                              int64_t data_tokens);

// What the run may use: the smaller of the machine's available memory (MemAvailable, and what the
// cgroup's memory.max leaves) and limit_gib when it is > 0; `source` says which it is.
struct MemoryLimit {
  double bytes = 0;
  std::string source;  // "run.memory_limit_gib = 2", "MemAvailable", "cgroup memory.max"
};
MemoryLimit memory_limit(double limit_gib);

// The estimate by part, one "  name  size  detail" line each (train --dry-run, model inspect).
std::string describe(const RunMemory& m);

}  // namespace k3::train
