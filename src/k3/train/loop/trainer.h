// Training a run (`k3lab train`): a new run or one resumed bit-identically from a checkpoint, its
// pre-flight checks for every curriculum phase, then one training loop a phase (train_loop.h:
// gradient accumulation, global-norm clipping, warmup + cosine, Muon + AdamW, periodic
// evaluation, samples and checkpoints, metrics.jsonl, a live progress line).
//
// A run owns its directory (an advisory lock, RUN_DIR/.lock) for as long as it trains. SIGINT,
// SIGTERM or SIGUSR1 stop it gracefully: the current step finishes, a checkpoint is written, the
// metrics and the loss plot are complete, and `k3lab train` exits with kStoppedExitStatus; a second
// signal ends it at once.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "k3/train/config/run_config.h"

namespace k3::train {

// The training loop's profile buckets (--profile): the step's own components are timed inside it.
inline constexpr const char* kStepBucket = "step (all of forward + backward)";
inline constexpr const char* kOptimizerBucket = "optimizer";

// `k3lab train`'s exit status after a graceful stop: the run is resumable (sysexits' EX_TEMPFAIL).
inline constexpr int kStoppedExitStatus = 75;

struct TrainOptions {
  bool quiet = false;  // no progress line or messages (tests)
};

// How to continue a run directory (see resume.h).
struct ResumeRequest {
  std::string run_dir;
  std::string config_path;                   // empty: the checkpoint's configuration
  std::vector<std::string> overrides;        // --set key=value, applied on top
  std::vector<std::string> allowed_changes;  // --allow-change KEY
};

struct TrainSummary {
  std::string run_dir;
  std::string last_checkpoint;  // empty when none was written
  std::string loss_plot;
  int64_t steps = 0;
  bool finished_before = false;  // a resumed run that had already reached train.steps
  int stop_signal = 0;           // the signal that stopped the run early, or 0
  double train_loss = NAN;       // mean over the last step
  double validation_loss = NAN;  // at the end of the run
  double loss_floor = NAN;
  std::string sample;             // text generated at the end, when [sample] asks for it
  std::string activation_report;  // what the activation manager held, and how (--profile)
};

// A new run in config.run.dir, which must hold no checkpoint.
TrainSummary train(const RunConfig& config, const TrainOptions& options);
// Continues a run from its newest usable checkpoint.
TrainSummary resume(const ResumeRequest& request, const TrainOptions& options);

}  // namespace k3::train
