// Expert load over training, for `k3lab report`: RUN_DIR/expert_load.jsonl holds one JSON line per
// global batch, keyed by the 0-based decoder layer of each MoE layer:
//   {"step": 120, "layers": {"1": {"tokens": 4096, "load": [530, 498, ...], "maxvio": 0.29,
//                                  "min": 402, "max": 661, "idle": 0}, "2": {...}}}
// "load" counts token-slots per expert (they sum to tokens·k); maxvio, min, max and idle follow
// from it and are written for readers of the raw file. Under expert parallelism a layer also has
//   "ranks": {"home_rows": [...], "rows": [...], "replicas": 6, "overflow": 0, "bytes": 81920}
// per ep rank: the rows routed to its home experts (what it computes without MoonEP) and the
// rows it computed; replica slots used, the largest plan overflow and bytes sent, over all ranks;
// under MoonEP also "plan_loads": [[...], ...], per micro-batch each expert's rows over the ep
// group of the record's rank (the loads that micro-batch's plan was made from; `k3lab plan
// --routing` replays them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "k3/base/svg_plot.h"
#include "k3/model/experts/routed_experts.h"
#include "k3/model/quantile_balancing.h"

namespace k3::train {

std::string expert_load_path(const std::string& run_dir);  // RUN_DIR/expert_load.jsonl

// Appends one record (the trainer calls it once per global batch, after the Quantile Balancing
// update), flushed at once. Creates the directory and file when missing.
void append_expert_load(const std::string& run_dir, int64_t step,
                        const std::map<int64_t, model::ExpertLoadStats>& layers,
                        const std::map<int64_t, model::DispatchStats>& dispatch = {});

struct ExpertLoadRecord {
  int64_t step = 0;
  std::map<int64_t, model::ExpertLoadStats> layers;
  std::map<int64_t, model::DispatchStats> dispatch;  // layers with "ranks"
};

// The records in step order. A record whose step is not after the previous one starts the history
// again from that step (a resumed or restarted run), dropping the records it replaces. A line that
// is not JSON (a write cut short by a crash) is skipped with a warning; a missing file, or a
// record of the wrong shape, is a k3::Error naming the file (and line).
std::vector<ExpertLoadRecord> read_expert_load(const std::string& path);

// Heatmaps of the records, at most max_columns of them (evenly spaced, always the last):
// rows = MoE layers, value = maxvio;
Heatmap maxvio_heatmap(const std::vector<ExpertLoadRecord>& records, size_t max_columns = 200);
// rows = the experts of one layer, value = load / mean load (1 is perfectly balanced).
Heatmap layer_load_heatmap(const std::vector<ExpertLoadRecord>& records, int64_t layer,
                           size_t max_columns = 200);

}  // namespace k3::train
