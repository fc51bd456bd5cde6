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
// A rank may hold two spans (zig-zag, KcpLayout): the fold then runs over all spans in sequence
// order, whichever rank holds them.
//
// Packed documents (one row, KcpLayout::documents): the state restarts at each document start. A
// span with a start in it leaves a state that does not depend on the one it received, so its M is
// 0 (the pair pass's [0 | I] restarts from [0 | 0] as well); a span that begins a document starts
// from zero instead of its incoming state, and sends no gradient back to it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/base/arena.h"
#include "k3/dist/comm.h"
#include "k3/kernels/kda/delta_rule.h"

namespace k3::model {

// Where a sequence's spans lie over the cp ranks: `slots` spans a rank, of equal length.
//   slots = 1: rank r holds span r (consecutive spans in rank order);
//   slots = 2: zig-zag, as ring attention needs it: rank r holds spans r and 2·ranks − 1 − r,
//              in that order (its local rows of each sequence are the two, one after the other).
struct KcpLayout {
  int ranks = 1, rank = 0, slots = 1;
  // The sequence's document starts, global token positions (one batch row; empty: every row is
  // one sequence).
  std::span<const int64_t> documents;
  int spans() const { return ranks * slots; }
  int span_of(int slot) const { return slot == 0 ? rank : 2 * ranks - 1 - rank; }
  // Where span c's pair sits among the gathered ones (its rank's, slot after slot).
  int gathered(int c) const;
};

// A span's documents, for the kernels: the starts inside it as kernel doc_starts (local, from 0;
// empty without documents), and how many tokens of the document it continues precede it (0: it
// begins a document; the whole prefix without documents).
struct SpanDocuments {
  std::vector<int64_t> starts;
  int64_t continued = 0;
  bool fresh() const { return continued == 0; }
};
SpanDocuments span_documents(const KcpLayout& layout, int span, int64_t T);
// Those of this rank's slots, in slot order.
std::vector<SpanDocuments> slot_documents(const KcpLayout& layout, int64_t T);

// What the forward keeps for the backward (buffers the caller owns). s: one span's shape.
struct KcpSaved {
  float* pairs = nullptr;        // layout.spans() pairs [B, H, K, V + K], as gathered
  float* incoming = nullptr;     // per slot, S_in of its span [B, H, K, V]
  float* chunk_saved = nullptr;  // per slot, the normal pass's records
};
int64_t kcp_pair_floats(const kernels::kda::DeltaRuleShape& s);   // one span's pair
int64_t kcp_state_floats(const kernels::kda::DeltaRuleShape& s);  // [B, H, K, V]
// The normal pass's records of this rank's slots, one after the other.
int64_t kcp_records_floats(const KcpLayout& layout, const kernels::kda::DeltaRuleShape& s);

// Every function below takes its scratch from `scratch` (the step arena) and rewinds it.
//
// s: one span's shape (s.T tokens of each of s.B rows; doc_starts must be empty); in and out
// hold this rank's slots·s.T tokens of each row (out [B, slots·T, H, V]). Fills `saved`.
void kcp_forward(Arena& scratch, const dist::Comm& cp, const KcpLayout& layout,
                 const kernels::kda::DeltaRuleShape& s,
                 const kernels::kda::DeltaRuleInputs<float>& in, float* out, const KcpSaved& saved);
// Gradients of this rank's inputs (all overwritten; dinitial_state is not used).
void kcp_backward(Arena& scratch, const dist::Comm& cp, const KcpLayout& layout,
                  const kernels::kda::DeltaRuleShape& s,
                  const kernels::kda::DeltaRuleInputs<float>& in, const KcpSaved& saved,
                  const float* dout, const kernels::kda::DeltaRuleGrads<float>& grads);

// The pair (M, S̃) of one span as [B, H, K, V + K] (S̃ then M along the last axis); s.doc_starts
// are the span's own (SpanDocuments::starts), `fresh` when it begins a document.
void kcp_span_pairs(Arena& scratch, const kernels::kda::DeltaRuleShape& s,
                    const kernels::kda::DeltaRuleInputs<float>& in, float* pairs,
                    bool fresh = false);
// The state entering span `span` from the gathered pairs of spans [0, span): [B, H, K, V].
void kcp_fold(Arena& scratch, const kernels::kda::DeltaRuleShape& s, const KcpLayout& layout,
              const float* pairs, int span, float* state);

}  // namespace k3::model
