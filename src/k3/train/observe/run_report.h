// `k3lab report`'s page: RUN_DIR/report.html, one self-contained HTML file (inline SVG, no
// script, nothing fetched) with the run's loss (train, validation, the data's entropy floor when
// known), learning rate, gradient norm, throughput, MFU, expert-load heatmap, communication bytes
// by group and by rank, pipeline timeline and activation memory by rank; and RUN_DIR/trace.json,
// the step timelines in the Chrome trace format Perfetto opens (the steps and the lead's time
// blocked in each group's collectives from metrics.jsonl, the pipeline ranks' measured schedule
// nodes from pipeline_trace.json).
#pragma once

#include <string>
#include <vector>

namespace k3::train {

struct RunReport {
  std::string html_path, trace_path;
  std::vector<std::string> plots;    // the ids of the sections drawn ("loss", "lr", ...)
  std::vector<std::string> missing;  // "id: why", for the sections the run has no data for
};

// Every section is in the page; one the run has no data for says why instead of a plot.
RunReport write_run_report(const std::string& run_dir);

}  // namespace k3::train
