// Training metrics as JSON lines: RUN_DIR/metrics.jsonl holds one JSON object per line, usually
// with a "step" (e.g. {"step": 120, "loss": 2.345, "lr": 0.0029}). The file is flushed after
// every record, so it can be followed while the run is going.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace k3::train {

std::string metrics_path(const std::string& run_dir);  // RUN_DIR/metrics.jsonl

class MetricsWriter {
 public:
  // Opens the metrics file of RUN_DIR. A fresh run (resume_step < 0) starts an empty file. A run
  // resumed from a checkpoint at resume_step keeps the records up to that step (and those
  // without a step) and drops the later ones, which the resumed run will write again.
  explicit MetricsWriter(const std::string& run_dir, int64_t resume_step = -1);

  // Appends RECORD, which must be a JSON object, as one line. NaN and infinite numbers are
  // written as null.
  void write(const nlohmann::json& record);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
};

// One metric over training: (step, value) pairs in file order. A null value reads as NaN.
struct MetricSeries {
  std::vector<double> steps;
  std::vector<double> values;
};

// Every numeric (or null) field of the records that have a "step", keyed by field name. A
// last line cut short by a crash is skipped; any other line that is not a JSON object is an
// error naming the file and line.
std::map<std::string, MetricSeries> read_metrics(const std::string& path);

}  // namespace k3::train
