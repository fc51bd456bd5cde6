#include "k3/planner/efficiency.h"

#include <algorithm>
#include <cmath>

namespace k3::planner {

double gemm_seconds(const Gemm& g, const Cluster& c, double ceiling, bool fp8) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0) return 0;
  // The output's tiles go to the SMs in waves; the last wave's idle SMs and the tiles' padding
  // beyond m and n are lost.
  const double sms = static_cast<double>(c.sms);
  const double tiles = g.batch * std::ceil(g.m / kGemmTile) * std::ceil(g.n / kGemmTile);
  const double waves = std::ceil(tiles / sms);
  const double occupancy = g.batch * g.m * g.n / (waves * sms * kGemmTile * kGemmTile);
  const double flops = 2 * g.batch * g.m * g.n * g.k;
  const double peak = fp8 ? c.peak_fp8_flops : c.peak_flops;
  const double operand = fp8 ? 1 : 2;  // the output in bf16 either way
  const double bytes = g.batch * ((g.m * g.k + g.k * g.n) * operand + g.m * g.n * 2);
  return std::max(flops / (peak * ceiling * occupancy), bytes / c.hbm_bandwidth);
}

MicroBatchCompute micro_batch_compute(const model::ModelConfig& model,
                                      const std::vector<model::WeightProduct>& products,
                                      const ComputeShape& s, const Cluster& c) {
  MicroBatchCompute out;
  const double tokens = static_cast<double>(s.tokens), pp = static_cast<double>(s.pp);
  const double forwards = s.recompute ? 2 : 1;
  // Every product's output passes one fused elementwise op (norm, activation, residual, rotation)
  // forward, read and written, and backward, its gradient and saved input read and one written.
  const double elementwise_passes = 2 * forwards + 3;
  double elementwise_bytes = 0;
  for (const model::WeightProduct& w : products) {
    double n = static_cast<double>(w.out), k = static_cast<double>(w.in);
    if (w.tp_dim == 0) n /= static_cast<double>(s.tp);
    if (w.tp_dim == 1) k /= static_cast<double>(s.tp);
    // A dense weight sees the micro-batch's tokens; a layer's routed experts (E/ep on this GPU,
    // one grouped GEMM) each see the ep group's tokens times k over E, routing balanced.
    double rows = tokens, batch = 1, calls = static_cast<double>(w.count) / pp;
    if (w.routed) {
      const double experts = static_cast<double>(model.num_experts);
      rows = tokens * static_cast<double>(s.ep * model.num_experts_per_token) / experts;
      batch = experts / static_cast<double>(s.ep);
      calls = static_cast<double>(w.count) / (experts * pp);
    }
    // The heads stay in bf16 under fp8, as the fp8 recipes keep them.
    const bool fp8 = s.fp8 && !w.head;
    const double forward = gemm_seconds({rows, n, k, batch}, c, s.ceiling, fp8);
    const double input_grad = gemm_seconds({rows, k, n, batch}, c, s.ceiling, fp8);
    const double weight_grad = gemm_seconds({k, n, rows, batch}, c, s.ceiling, fp8);
    out.gemm_seconds += calls * (forwards * forward + input_grad + weight_grad);
    out.gemm_flops += calls * (2 + forwards) * 2 * batch * rows * n * k;
    // Under sequence parallelism a row-parallel output is reduce-scattered: each tp rank's ops
    // see its share of the tokens.
    const double op_rows =
        w.tp_dim == 1 && s.sequence_parallel ? rows / static_cast<double>(s.tp) : rows;
    elementwise_bytes += calls * batch * op_rows * n * 2 * elementwise_passes;
    // fp8 operands are cast from bf16, each with a transposed copy for the weight gradient's
    // product (read 2 bytes, write 1 + 1): the input forward, the output's gradient backward.
    if (fp8) elementwise_bytes += calls * batch * rows * (forwards * k + n) * 4;
  }
  out.elementwise_seconds = elementwise_bytes / c.hbm_bandwidth;
  // The mixers' cores: heads split over tp, queries over cp; a third of the count is the forward.
  const double mixing =
      model::mixing_flops_per_token(model, s.seq) * tokens / static_cast<double>(s.tp) / pp;
  out.attention_seconds =
      mixing / 3 * (forwards / kAttentionForward + 2 / kAttentionBackward) / c.peak_flops;
  return out;
}

double newton_schulz_flops(const std::vector<model::WeightProduct>& products) {
  double flops = 0;
  for (const model::WeightProduct& w : products) {
    if (w.head) continue;
    const double a = static_cast<double>(std::min(w.out, w.in));
    const double b = static_cast<double>(std::max(w.out, w.in));
    // X·Xᵀ (a×b·b×a), A·A (a×a·a×a), and (bA + cA²)·X (a×a·a×b), five times.
    flops += static_cast<double>(w.count) * 5 * (2 * a * a * b + 2 * a * a * a + 2 * a * a * b);
  }
  return flops;
}

}  // namespace k3::planner
