// RUN_DIR/loss.svg: training and validation loss over the steps recorded in metrics.jsonl, with
// the data's entropy floor when it is known. Drawn by the trainer at each evaluation and at the
// end, and by `k3lab plot RUN_DIR` at any time.
#pragma once

#include <map>
#include <string>

#include "k3/base/svg_plot.h"
#include "k3/train/config/run_config.h"
#include "k3/train/observe/metrics.h"

namespace k3::train {

// The lowest reachable loss (nats per token) of the run's data, NaN when unknown.
double data_loss_floor(const RunConfig& config);

// Training and validation loss of METRICS over the steps, and the floor when it is finite.
LinePlot loss_plot(const std::map<std::string, MetricSeries>& metrics, double floor,
                   const std::string& title);

// Draws RUN_DIR/loss.svg from RUN_DIR/metrics.jsonl; returns its path.
std::string write_loss_plot(const std::string& run_dir, const RunConfig& config);

}  // namespace k3::train
