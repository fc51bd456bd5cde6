#include "k3/train/observe/expert_load_recorder.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "k3/train/observe/expert_load.h"
#include "k3/train/observe/expert_load_gather.h"

namespace k3::train {

ExpertLoadRecorder::ExpertLoadRecorder(const dist::ProcessGrid& grid, bool has_experts,
                                       std::string run_dir)
    : grid_(grid), has_experts_(has_experts), run_dir_(std::move(run_dir)) {}

void ExpertLoadRecorder::record(int64_t step, const StepResult& result, nlohmann::json& rec) {
  if (!has_experts_ || !result.applied) return;
  const ExpertLoadRecord all =
      gather_expert_load(grid_.pp(), {step, result.expert_load, result.dispatch});
  if (grid_.world().rank() != 0 || all.layers.empty()) return;
  const auto spread = [](const std::vector<int64_t>& rows) {
    double sum = 0;
    for (int64_t r : rows) sum += static_cast<double>(r);
    const double mean = sum / static_cast<double>(rows.size());
    return std::pair{*std::max_element(rows.begin(), rows.end()), mean};
  };
  for (const auto& [layer, d] : all.dispatch) {
    const std::string l = std::to_string(layer);
    const auto [max, mean] = spread(d.rows);
    rec["moe.rows_max." + l] = max;
    rec["moe.rows_mean." + l] = mean;
    rec["moe.home_rows_max." + l] = spread(d.home_rows).first;
    rec["moe.replicas." + l] = d.replicas;
    rec["moe.overflow." + l] = d.overflow;
    rec["moe.bytes." + l] = d.bytes;
  }
  double worst = 0;
  for (const auto& [layer, st] : all.layers) {
    const std::string l = std::to_string(layer);
    rec["moe.maxvio." + l] = st.maxvio;
    rec["moe.min_load." + l] = st.min_load;
    rec["moe.max_load." + l] = st.max_load;
    rec["moe.idle." + l] = st.idle;
    worst = std::max(worst, st.maxvio);
  }
  rec["moe.maxvio"] = worst;
  append_expert_load(run_dir_, step, all.layers, all.dispatch);
}

}  // namespace k3::train
