// --routing: one step of a run's expert-load records (train/observe/expert_load.h) as the plan's
// routing.
#include "k3/base/error.h"
#include "k3/planner/plan.h"
#include "k3/train/observe/expert_load.h"

namespace k3::planner {

std::map<int64_t, MoeRouting> read_routing(const std::string& expert_load_jsonl, int64_t step) {
  const ErrorContext ctx{expert_load_jsonl, "--routing", -1};
  const std::vector<train::ExpertLoadRecord> records = train::read_expert_load(expert_load_jsonl);
  const int64_t wanted = step < 0 && !records.empty() ? records.back().step : step;
  for (const train::ExpertLoadRecord& r : records) {
    if (r.step != wanted) continue;
    K3_CHECK_CTX(!r.dispatch.empty(), ctx, "step ", wanted,
                 " has no dispatch figures (a run without expert parallelism)");
    std::map<int64_t, MoeRouting> out;
    for (const auto& [layer, d] : r.dispatch)
      out[layer] = {d.home_rows.empty() ? 0 : d.home_rows.front(), d.plan_loads};
    return out;
  }
  K3_CHECK_CTX(false, ctx, "no record of step ", step);
  return {};
}

}  // namespace k3::planner
