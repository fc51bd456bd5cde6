// The roofline (math §10, docs/planner.md): one GPU's compute from the efficiency model
// (efficiency.h) over its micro-batches, the bubble as idle compute, the optimizer's update, every
// transfer at its link's bandwidth, and overlap as stated: the dp group's transfers (the
// reduction, ZeRO's gather, Muon's blocks when tp = 1) hide behind the step's compute, and so do
// the ep group's all-to-alls under DualPipe, which overlaps them with the other direction's
// chunk, or where overlap is asked for (--ep-overlap) (what exceeds the compute shows); every
// other transfer is on the critical path.
#include <algorithm>

#include "k3/model/inventory.h"
#include "k3/planner/plan_internal.h"

namespace k3::planner::detail {
namespace {

// The update reads the gradients and the optimizer's states and master weights, writes those and
// the working weights, in HBM, for the values a GPU holds (the dense ones over tp·pp, the routed
// experts over tp·ep·pp; two stages' under DualPipe), as ZeRO shards them; Muon's Newton-Schulz
// products are spread over every GPU.
double optimizer_seconds(const PlanRequest& r, const ModelCounts& counts) {
  const Layout& l = r.layout;
  const double values = (r.schedule == "dualpipe" ? 2 : 1) * counts.values_per_gpu(l);
  // Under ZeRO a rank updates its shard of the values alone: it reads that shard's gradients and
  // writes the whole bf16 working copy (the gather fills it).
  const Precision& pr = r.cluster.precision;
  const BytesPerParam b = bytes_per_param(pr, r.optimizer == "adamw" ? 8 : 4, l.zero, l.dp);
  const double gradient = l.zero >= 1 ? pr.gradient / static_cast<double>(l.dp) : pr.gradient;
  const double on_gpu = r.optimizer_on_host ? 0 : 2 * (b.master + b.state);
  double seconds = values * (b.weight + gradient + on_gpu) / r.cluster.hbm_bandwidth;
  if (r.optimizer == "muon")  // every matrix of every stage a GPU holds, DualPipe's two included
    seconds += (r.schedule == "dualpipe" ? 2 : 1) * newton_schulz_flops(counts.products) /
               static_cast<double>(r.layout.gpus()) / (r.cluster.peak_flops * r.gemm_ceiling);
  return seconds;
}

}  // namespace

void roofline(Plan& p, const ModelCounts& counts) {
  const PlanRequest& r = p.request;
  const Layout& l = r.layout;
  const double gpus = static_cast<double>(l.gpus());
  const double tokens = static_cast<double>(p.sequences * r.seq);
  const double matmul_params = static_cast<double>(p.params_active - p.params_embedding);
  // The sequence mixers' FLOPs beyond the weight products are the model's own count.
  p.model_flops = tokens * (6 * matmul_params + model::mixing_flops_per_token(r.model, r.seq));
  ComputeShape shape;
  shape.tokens = r.micro_rows * r.seq / l.cp;
  shape.seq = r.seq;
  shape.tp = l.tp, shape.pp = l.pp, shape.ep = l.ep, shape.cp = l.cp;
  shape.sequence_parallel = l.sequence_parallel && l.tp > 1;
  shape.recompute = r.activation == "recompute";
  shape.fp8 = r.fp8;
  shape.ceiling = r.gemm_ceiling;
  p.micro_batch = micro_batch_compute(r.model, counts.products, shape, r.cluster);
  p.compute_seconds = static_cast<double>(p.micro_batches) * p.micro_batch.seconds();
  p.bubble_seconds = p.compute_seconds * p.bubble;
  p.optimizer_seconds = optimizer_seconds(r, counts);
  double hidden = 0, exposed = 0;
  p.nvlink_seconds = p.ib_seconds = 0;
  for (const Transfer& t : p.traffic) {
    const double s =
        t.wire_bytes() / (t.across_nodes ? r.cluster.ib_bandwidth : r.cluster.nvlink_bandwidth);
    (t.across_nodes ? p.ib_seconds : p.nvlink_seconds) += s;
    const bool hides =
        t.group == "dp" || (t.group == "ep" && (r.ep_overlap || r.schedule == "dualpipe"));
    (hides ? hidden : exposed) += s;
  }
  p.exposed_comm_seconds = exposed + std::max(0.0, hidden - p.compute_seconds);
  p.step_seconds =
      p.compute_seconds + p.bubble_seconds + p.optimizer_seconds + p.exposed_comm_seconds;
  p.mfu = p.model_flops / (p.step_seconds * gpus * r.cluster.peak_flops);
}

}  // namespace k3::planner::detail
