// The efficiency model (docs/planner.md, "Step time"): one GPU's compute in a step from the shapes
// of its operations instead of one achieved-over-peak constant. A matrix product takes the larger
// of its FLOPs at the tensor cores' rate (times one calibrated ceiling and the share of the SMs
// its output tiles keep busy) and its operands' bytes at HBM speed; the attention cores run at
// FlashAttention-3's measured share of peak; the elementwise work around each product streams at
// HBM speed; the optimizer reads and writes its states at HBM speed and runs Muon's Newton-Schulz
// products as GEMMs. Under fp8 the weight products but the heads' run at the FP8 peak, and their
// operands' casts (with the transposed copies the weight gradients read) stream at HBM speed.
#pragma once

#include <cstdint>
#include <vector>

#include "k3/model/inventory.h"
#include "k3/planner/cluster.h"

namespace k3::planner {

// The share of the tensor cores' peak a large bf16 GEMM reaches inside a training step, calibrated
// once, on Llama 3 405B on 8,192 H100s (docs/planner.md): the planner's one fitted number.
inline constexpr double kGemmCeiling = 0.567;
// FlashAttention-3's share of the H100's bf16 peak, forward and backward (docs/planner.md).
inline constexpr double kAttentionForward = 0.62, kAttentionBackward = 0.535;
// Output tile of one SM's GEMM work (rows x columns): Hopper's common CTA tile.
inline constexpr double kGemmTile = 128;

// C[m×n] = A[m×k]·B[k×n], `batch` of them launched together (a grouped GEMM).
struct Gemm {
  double m = 0, n = 0, k = 0, batch = 1;
};

// Its seconds on one GPU of `c` at `ceiling`, operands in fp8 (peak_fp8_flops, one byte) or bf16.
double gemm_seconds(const Gemm& g, const Cluster& c, double ceiling, bool fp8);

// What one GPU computes in one micro-batch, an average pipeline stage's share of the layers (the
// heads and multi-token prediction modules spread over the stages with them).
struct MicroBatchCompute {
  double gemm_seconds = 0, gemm_flops = 0;
  double attention_seconds = 0;    // the sequence mixers' cores (softmax attention, KDA)
  double elementwise_seconds = 0;  // the products' outputs streamed through their fused ops
  double seconds() const { return gemm_seconds + attention_seconds + elementwise_seconds; }
};

struct ComputeShape {
  int64_t tokens = 0;  // a reader's micro-batch on one GPU: sequences × seq / cp
  int64_t seq = 0;
  int64_t tp = 1, pp = 1, ep = 1, cp = 1;
  bool sequence_parallel = false;  // row-parallel outputs reduce-scattered over tp's tokens
  bool recompute = false;          // the forward runs twice
  bool fp8 = false;                // the weight products in fp8
  double ceiling = kGemmCeiling;
};

MicroBatchCompute micro_batch_compute(const model::ModelConfig& model,
                                      const std::vector<model::WeightProduct>& products,
                                      const ComputeShape& s, const Cluster& c);

// Muon's Newton-Schulz FLOPs in one step over the whole model: five iterations on every matrix but
// the heads'.
double newton_schulz_flops(const std::vector<model::WeightProduct>& products);

}  // namespace k3::planner
