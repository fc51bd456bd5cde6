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
#include "k3/train/config/run_config.h"
#include "k3/train/preflight/memory_estimate.h"

namespace k3::train {

struct PreflightResult {
  RunMemory memory;  // of the rank needing the most (the pipeline ranks differ)
  MemoryLimit limit;
  data::TokenDataset dataset;  // loaded and checked: the run trains on it
  int threads = 0;             // train.threads capped to the cores (with a warning); 0: unset
};

// The process grid of [parallel] on a job of WORLD_SIZE ranks: the sizes must multiply to it,
// the global batch (train.batch_size sequences) must split evenly over dp, under sequence
// parallelism each rank's tokens (batch_size / dp · seq_len) over tp. Throws one line naming the
// field.
void check_parallel(const ParallelSection& p, const TrainSection& train, int64_t seq_len,
                    int world_size);

// Runs every check above for a run of MODEL (read from config.model.config, or a checkpoint's);
// throws a k3::Error (one line naming the field and the numbers) on the first that fails.
// Writes nothing.
PreflightResult preflight(const RunConfig& config, const model::ModelConfig& mc);

// `train --dry-run`: the checks, then what the run would use, as text.
std::string dry_run(const RunConfig& config);

}  // namespace k3::train
