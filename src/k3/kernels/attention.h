// Causal softmax attention that never materializes a T×T matrix: query blocks against key blocks
// with an online softmax in fp32 (flash-attention style), forward and backward.
//
// Layouts (row-major, heads innermost so that they are what a linear projection writes):
//   q   [B, T, H, dqk + dr]   per head: [q_n | q_r]
//   k   [B, T, H, dqk]        per-head key part
//   kr  [B, T, dr]            optional key part shared by every head (MLA's k_r); null when dr == 0
//   v   [B, T, H, dv]
//   out [B, T, H, dv]
//   lse [B, H, T]             log-sum-exp of each query's scores, saved for backward
// Score of query t and key s <= t: scale * (<q_n, k_n> + <q_r, k_r>).
#pragma once

#include <cstdint>

#include "k3/kernels/gemm.h"

namespace k3::kernels {

struct AttentionShape {
  int64_t B = 1, T = 1, H = 1;
  int64_t dqk = 64;  // per-head key dim (MLA: d_n)
  int64_t dr = 0;    // shared key dim (MLA: d_r), 0 if none
  int64_t dv = 64;   // value dim
  float scale = 0;   // 0 means 1/sqrt(dqk + dr)
  // false: every query sees every key of its sequence (the vision tower's full_attention.h; the
  // kernels here are causal only).
  bool causal = true;
  // The products' precision: in bf16, q·kᵀ, p·v and the backward's products take bf16 operands
  // (fp32 sums); the softmax, the log-sum-exp and the gradient's elementwise terms stay fp32.
  Precision precision = Precision::F32;
  float effective_scale() const;
};

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* kr,
                       const float* v, float* out, float* lse);

// Writes dq, dk, dkr (when dr > 0), dv (not accumulated). Needs out and lse from forward.
void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* kr,
                        const float* v, const float* out, const float* lse, const float* dout,
                        float* dq, float* dk, float* dkr, float* dv);

}  // namespace k3::kernels
