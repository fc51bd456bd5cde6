// The roofline (math §10, docs/planner.md): compute at the preset's dense BF16 rate times an
// efficiency, every transfer at its link's bandwidth, the bubble as idle compute, and overlap as
// stated: the dp group's transfers (the reduction, ZeRO's gather, Muon's blocks when tp = 1) hide
// behind the step's compute (what exceeds it shows), every other transfer is on the critical path.
#include <algorithm>

#include "k3/model/inventory.h"
#include "k3/planner/plan_internal.h"

namespace k3::planner::detail {

void roofline(Plan& p) {
  const PlanRequest& r = p.request;
  const double gpus = static_cast<double>(r.layout.gpus());
  const double tokens = static_cast<double>(p.sequences * r.seq);
  const double matmul_params = static_cast<double>(p.params_active - p.params_embedding);
  // The sequence mixers' FLOPs beyond the weight products are the model's own count.
  p.model_flops = tokens * (6 * matmul_params + model::mixing_flops_per_token(r.model, r.seq));
  // Recomputation runs the forward (a third of the work) again.
  const double hardware = p.model_flops * (r.activation == "recompute" ? 4.0 / 3.0 : 1.0);
  p.compute_seconds = hardware / gpus / (r.cluster.peak_flops * r.efficiency);
  p.bubble_seconds = p.compute_seconds * p.bubble;
  double hidden = 0, exposed = 0;
  p.nvlink_seconds = p.ib_seconds = 0;
  for (const Transfer& t : p.traffic) {
    const double s =
        t.wire_bytes() / (t.across_nodes ? r.cluster.ib_bandwidth : r.cluster.nvlink_bandwidth);
    (t.across_nodes ? p.ib_seconds : p.nvlink_seconds) += s;
    (t.group == "dp" ? hidden : exposed) += s;
  }
  p.exposed_comm_seconds = exposed + std::max(0.0, hidden - p.compute_seconds);
  p.step_seconds = p.compute_seconds + p.bubble_seconds + p.exposed_comm_seconds;
  p.mfu = p.model_flops / (p.step_seconds * gpus * r.cluster.peak_flops);
}

}  // namespace k3::planner::detail
