// RUN_DIR/loss.svg: training and validation loss over the steps recorded in metrics.jsonl, with
// the data's entropy floor when it is known. Drawn by the trainer at each evaluation and at the
// end, and by `k3lab plot RUN_DIR` at any time.
#pragma once

#include <string>

#include "k3/train/run_config.h"

namespace k3::train {

// The lowest reachable loss (nats per token) of the run's data, NaN when unknown.
double data_loss_floor(const RunConfig& config);

// Draws RUN_DIR/loss.svg from RUN_DIR/metrics.jsonl; returns its path.
std::string write_loss_plot(const std::string& run_dir, const RunConfig& config);

}  // namespace k3::train
