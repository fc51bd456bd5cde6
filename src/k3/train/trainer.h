// The training loop: gradient accumulation, global-norm clipping, warmup + cosine, Muon + AdamW,
// periodic evaluation, samples and checkpoints, metrics.jsonl, a live progress line, and
// resumption that continues bit-identically from the latest checkpoint.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "k3/train/run_config.h"

namespace k3::train {

// The training loop's profile buckets (--profile): the step's own components are timed inside it.
inline constexpr const char* kStepBucket = "step (all of forward + backward)";
inline constexpr const char* kOptimizerBucket = "optimizer";

struct TrainOptions {
  bool resume = false;      // continue from the run directory's latest checkpoint
  bool quiet = false;       // no progress line or messages (tests)
};

struct TrainSummary {
  std::string run_dir;
  std::string last_checkpoint;  // empty when none was written
  std::string loss_plot;
  int64_t steps = 0;
  double train_loss = NAN;       // mean over the last step
  double validation_loss = NAN;  // at the end of the run
  double loss_floor = NAN;
  std::string sample;            // text generated at the end, when [sample] asks for it
};

TrainSummary train(const RunConfig& config, const TrainOptions& options);

}  // namespace k3::train
