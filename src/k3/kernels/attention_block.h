// Attention of one block of queries against one block of keys that all precede them (no causal
// mask inside the pair), as ring attention needs it: under context parallelism a rank's queries
// meet the keys of earlier sequence chunks one block at a time, and the partial results are merged
// with log-sum-exp weights. The diagonal block (a chunk against its own keys) is the causal
// kernel's (attention.h).
//
// Layouts as in attention.h, with the query block's length Tq and the key block's Tk:
//   q [B, Tq, H, dqk + dr], k [B, Tk, H, dqk], kr [B, Tk, dr] (null when dr == 0),
//   v [B, Tk, H, dv], out [B, Tq, H, dv], lse [B, H, Tq] (natural log).
#pragma once

#include <cstdint>

#include "k3/kernels/attention.h"

namespace k3::kernels {

// out and lse of the queries against this key block alone (s.T is not read).
void attention_block_forward(const AttentionShape& s, int64_t Tq, int64_t Tk, const float* q,
                             const float* k, const float* kr, const float* v, float* out,
                             float* lse);

// Merges a partial result (out2, lse2) over other keys into (out, lse), in place:
//   lse = log(e^lse + e^lse2),  out = e^(lse_old − lse) out + e^(lse2 − lse) out2.
void attention_merge(int64_t B, int64_t Tq, int64_t H, int64_t dv, float* out, float* lse,
                     const float* out2, const float* lse2);

// This key block's part of the backward, given the final (merged) out and lse of the queries:
// p = exp(score − lse), D = Σ dout ∘ out; accumulates dq, and dk, dkr, dv of this key block.
void attention_block_backward(const AttentionShape& s, int64_t Tq, int64_t Tk, const float* q,
                              const float* k, const float* kr, const float* v, const float* out,
                              const float* lse, const float* dout, float* dq, float* dk, float* dkr,
                              float* dv);

}  // namespace k3::kernels
