// Errors before work: everything a training run can be refused for is checked before its first
// step, and before anything big is allocated. In order: the model configuration (parsed,
// validated, its parameter registry built without allocation), the optimizer's routing rules, the
// memory the run needs against what the machine has free (or run.memory_limit_gib), then the
// data: the training split must hold one batch, and with evaluation on, the validation split one
// evaluation window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/data/dataset.h"
#include "k3/model/memory_estimate.h"
#include "k3/optim/param_groups.h"
#include "k3/train/run_config.h"

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

struct PreflightResult {
  RunMemory memory;  // of the rank needing the most (the pipeline ranks differ)
  MemoryLimit limit;
  data::TokenDataset dataset;  // loaded and checked: the run trains on it
  int threads = 0;             // train.threads capped to the cores (with a warning); 0: unset
};

// The process grid of [parallel] on a job of WORLD_SIZE ranks: the sizes must multiply to it,
// the global batch (train.batch_size sequences) must split evenly over dp, under sequence
// parallelism each rank's tokens (batch_size / dp · seq_len) over tp, and only data and tensor
// parallelism are available so far. Throws one line naming the field.
void check_parallel(const ParallelSection& p, const TrainSection& train, int64_t seq_len,
                    int world_size);

// Runs every check above for a run of MODEL (read from config.model.config, or a checkpoint's);
// throws a k3::Error (one line naming the field and the numbers) on the first that fails.
// Writes nothing.
PreflightResult preflight(const RunConfig& config, const model::ModelConfig& mc);

// `train --dry-run`: the checks, then what the run would use, as text.
std::string dry_run(const RunConfig& config);

}  // namespace k3::train
