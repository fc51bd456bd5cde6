// KCP: the gated delta rule (kernels/kda/delta_rule.h) over a sequence split along tokens across
// the ranks of a context-parallel group, each rank holding one contiguous span (rank order).
//
// Per head the state update is affine in the state: S_t = A_t S_{t−1} + β_t k_t v_tᵀ with
// A_t = (I − β_t k_t k_tᵀ) Diag(exp g_t). Over a rank's span that composes to one pair (M, S̃):
//   S_out = M S_in + S̃,   M = A_last ⋯ A_first [K, K],   S̃ = the span's final state from zero.
// Both come out of one chunked pass: the state's columns evolve independently, so a pass over
// values [v | 0] from the initial state [0 | I] ends in [S̃ | M] ([K, V + K] per head).
//
// Forward: that pass, one all-gather of the pairs ([B, H, K, V + K] fp32 per rank: its size does
// not depend on the sequence length), the incoming state S_in(r) = M_{r−1} S_in(r−1) + S̃_{r−1}
// (S_in(0) = 0) folded from the predecessors' pairs, then the normal chunked pass from S_in(r).
// Backward: the normal pass's backward gives each rank dS_in(r); one all-gather of those
// ([B, H, K, V] per rank) lets every rank run the transposed fold in reverse rank order,
//   T_r = dS_in(r) + M_rᵀ T_{r+1},   dS̃_r = T_{r+1},   dM_r = T_{r+1} S_in(r)ᵀ,
// and the pair pass (recomputed, not saved) backpropagates [dS̃ | dM] into k, v, g, β.
//
// Packed documents (doc_starts) are not supported here yet: each batch row is one sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/kernels/kda/delta_rule.h"

namespace k3::model {

// What the forward keeps for the backward (buffers the caller owns).
struct KcpSaved {
  float* pairs = nullptr;        // every rank's [B, H, K, V + K], rank after rank
  float* incoming = nullptr;     // S_in of this rank [B, H, K, V]
  float* chunk_saved = nullptr;  // the normal pass's records (kernels::kda::chunk_saved_floats)
};
int64_t kcp_pair_floats(const kernels::kda::DeltaRuleShape& s);   // one rank's pair
int64_t kcp_state_floats(const kernels::kda::DeltaRuleShape& s);  // [B, H, K, V]

// This rank's span: s.T tokens of each of s.B rows (doc_starts must be empty). out [B, T, H, V].
// Fills `saved` (pairs: cp.size() pairs).
void kcp_forward(const dist::Comm& cp, const kernels::kda::DeltaRuleShape& s,
                 const kernels::kda::DeltaRuleInputs<float>& in, float* out, const KcpSaved& saved);
// Gradients of this rank's inputs (all overwritten; dinitial_state is not used).
void kcp_backward(const dist::Comm& cp, const kernels::kda::DeltaRuleShape& s,
                  const kernels::kda::DeltaRuleInputs<float>& in, const KcpSaved& saved,
                  const float* dout, const kernels::kda::DeltaRuleGrads<float>& grads);

// The pair (M, S̃) of one span as [B, H, K, V + K] (S̃ then M along the last axis).
void kcp_span_pairs(const kernels::kda::DeltaRuleShape& s,
                    const kernels::kda::DeltaRuleInputs<float>& in, float* pairs);
// The state entering span `rank` from the pairs of spans [0, rank): [B, H, K, V].
void kcp_fold(const kernels::kda::DeltaRuleShape& s, const float* pairs, int rank, float* state);

}  // namespace k3::model
