// The gated delta rule at the heart of Kimi Delta Attention (math §3, step 6), per head:
//   S ← Diag(exp(g_t)) S;  u = v_t − Sᵀ k_t;  S ← S + β_t k_t uᵀ;  o_t = Sᵀ q_t
// with a state S ∈ R^{K×V} per (sequence, head). Two implementations with one contract:
//   recurrent: token by token (the reference; templated so tests run it in double),
//   chunked:   the WY algorithm over chunks of 64 tokens, dense tiles (the fast path).
//
// Layouts (row-major, heads innermost, as linear projections write them):
//   q, k  [B, T, H, K]   (q already L2-normalized and scaled, k L2-normalized, by the caller)
//   v     [B, T, H, V]
//   g     [B, T, H, K]   per-channel log-decay (natural log, ≤ 0, finite)
//   beta  [B, T, H]
//   out   [B, T, H, V]
//   state [N, H, K, V]   N = number of sequences: B, or the number of documents when packed
// Packed documents: when doc_starts is given (B must be 1), it lists the first token of each
// document, starting with 0 and strictly increasing; the state restarts from that document's
// initial state at each start (cu_seqlens-style, without the final T).
//
// final_state may be the initial_state buffer (the state is updated in place). Backward passes
// overwrite dq, dk, dv, dg, dbeta (all required) and dinitial_state (optional; it may be the
// dfinal_state buffer).
// All entry points run their own OpenMP loop over (sequence, head) pairs (the chunked ones over
// groups of heads of a sequence, delta_rule_layout.h): call them from serial code.
#pragma once

#include <cstdint>
#include <span>

#include "k3/kernels/gemm.h"
#include "k3/kernels/kda/sequences.h"

namespace k3::kernels::kda {

struct DeltaRuleShape {
  int64_t B = 1, T = 1, H = 1, K = 64, V = 64;
  std::span<const int64_t> doc_starts;  // empty: each batch row is one sequence
  // The chunked kernels' products (docs/precision.md): in bf16 the pair products and the state's
  // products take bf16 operands (fp32 sums, the state itself fp32); the decays, the WY inverse and
  // its application stay fp32. The recurrent reference is fp32 (or double) throughout.
  kernels::Precision precision = kernels::Precision::F32;
  int64_t num_sequences() const { return kda::num_sequences(B, doc_starts); }
};

template <typename T>
struct DeltaRuleInputs {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  const T* initial_state = nullptr;  // [N, H, K, V] or null (zeros)
};

template <typename T>
struct DeltaRuleGrads {
  T *dq = nullptr, *dk = nullptr, *dv = nullptr, *dg = nullptr, *dbeta = nullptr;
  T* dinitial_state = nullptr;  // null when not wanted
};

// Recurrent reference. final_state may be null.
template <typename T>
void recurrent_forward(const DeltaRuleShape& s, const DeltaRuleInputs<T>& in, T* out,
                       T* final_state);
// Backpropagation through the recurrence; dfinal_state may be null (zero).
template <typename T>
void recurrent_backward(const DeltaRuleShape& s, const DeltaRuleInputs<T>& in, const T* dout,
                        const T* dfinal_state, const DeltaRuleGrads<T>& grads);

// Chunked WY algorithm, fp32. Each sequence is cut into chunks of kChunk tokens aligned to its own
// start (a chunk never spans a document start). For the backward, the forward saves one record
// per chunk and head in chunk_saved (chunk_saved_floats(s) floats, chunks numbered sequence by
// sequence): the state entering the chunk, the only O(K·V) memory kept, and the chunk's products
// that cost GEMMs to recompute, O(kChunk·(V + kChunk)): Ṽ, V − (Γ⊙K) S and the three kChunk²
// pair matrices. chunk_saved and final_state may be null (forward only). The backward reads the
// records instead of in.initial_state.
//
// Decays: any finite g ≤ 0 is exact. The bounded form (g ≥ −5, math §3) always takes the dense
// tile path; a 16-token sub-chunk whose decay is steeper takes an exact per-pair path.
constexpr int64_t kChunk = 64;
int64_t chunk_saved_floats(const DeltaRuleShape& s);
void chunk_forward(const DeltaRuleShape& s, const DeltaRuleInputs<float>& in, float* out,
                   float* final_state, float* chunk_saved);
void chunk_backward(const DeltaRuleShape& s, const DeltaRuleInputs<float>& in,
                    const float* chunk_saved, const float* dout, const float* dfinal_state,
                    const DeltaRuleGrads<float>& grads);

}  // namespace k3::kernels::kda
