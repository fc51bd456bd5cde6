// Building blocks of the chunked delta rule (delta_rule.h): one chunk's inputs, per-thread
// workspaces, the decayed pair products inside a chunk, the WY inverse, and the part of a chunk's
// computation that forward and backward share.
//
// Inside a chunk, with G the cumulative log-decay from the chunk start, the pair products are
//   Aqk[r,s] = Σ_c q_{r,c} e^{G_{r,c} − G_{s,c}} k_{s,c}  (s ≤ r),
//   Pkk[r,s] = Σ_c k_{r,c} e^{G_{r,c} − G_{s,c}} k_{s,c}  (s < r; A_kk = Diag(β) Pkk).
// They are dense tiles: the rows of each 16-token sub-chunk i are computed as one product
// (x ⊙ e^{G − R_i}) · (k ⊙ e^{R_i − G})ᵀ against every column up to the sub-chunk's end, with the
// exponent re-centred at R_i = G at the sub-chunk's middle token; each product term is then the
// exact term times rounding, whatever the scale. Against earlier sub-chunks the column factor
// e^{R_i − G_s} ≤ 1 (G only decreases) and the row factor ≤ e^{kMaxExponent}: nothing overflows,
// and a column factor that underflows (exponent below −87) belongs to a pair whose true decay
// e^{G_r − G_s} < e^{kMaxExponent − 87} ≈ 1e-19, harmless to drop. Inside the sub-chunk both
// factors stay within e^{±kMaxExponent} as long as the decay over half a sub-chunk does: always
// for the bounded form (g ≥ −5: at most 8 · 5 = 40), checked per sub-chunk and channel. A steeper
// sub-chunk (the unbounded form) re-centres at its start instead, so every factor against earlier
// columns is ≤ 1, and computes its 16×16 diagonal block pair by pair with one exponential per
// pair and channel, each of G_r − G_s ≤ 0: no inf or NaN for any finite g ≤ 0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/kda/delta_rule.h"
#include "k3/kernels/kda/delta_rule_layout.h"

namespace k3::kernels::kda::chunk {

inline constexpr int64_t kSub = 16;
inline constexpr float kMaxExponent = 44.0f;

// Matrices indexed by token pairs of one chunk are kChunk × kChunk, row stride kLd.
inline constexpr int64_t kLd = kChunk;

// One chunk: L tokens of one (sequence, head); row r of q is q + r * ldqk.
struct ChunkRows {
  int64_t L, K, V;
  const float *q, *k, *v, *g, *beta;
  int64_t ldqk, ldv, ldbeta;
  Precision precision;  // of the pair and state products
  float b(int64_t r) const { return beta[r * ldbeta]; }
};

// The chunk of (sequence, head) rows r starting at token t0 of the sequence.
inline ChunkRows chunk_rows(const DeltaRuleShape& s, const DeltaRuleInputs<float>& in,
                            const layout::HeadRows& r, int64_t t0) {
  return {.L = std::min(kChunk, r.length - t0),
          .K = s.K,
          .V = s.V,
          .q = in.q + r.qk + t0 * r.ldqk,
          .k = in.k + r.qk + t0 * r.ldqk,
          .v = in.v + r.v + t0 * r.ldv,
          .g = in.g + r.qk + t0 * r.ldqk,
          .beta = in.beta + r.beta + t0 * r.ldbeta,
          .ldqk = r.ldqk,
          .ldv = r.ldv,
          .ldbeta = r.ldbeta,
          .precision = s.precision};
}

// Cuts named arrays out of one buffer, each 64-byte aligned. With a null base it only counts.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(int64_t n) {
    float* p = base_ ? base_ + used_ : nullptr;
    used_ += static_cast<size_t>((n + 15) / 16 * 16);
    return p;
  }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

// A workspace type built as Work(Carver&, args...), laid out in this thread's buffer
// (attn::thread_buffer, slot Chunk).
template <typename Work, typename... Args>
Work thread_work(Args... args) {
  Carver sizing(nullptr);
  Work(sizing, args...);
  Carver carver(attn::thread_buffer(attn::Slot::Chunk, sizing.used()));
  return Work(carver, args...);
}

// X = (I + Diag(β) P)⁻¹ for P strictly lower triangular, by forward substitution. X is unit lower
// triangular with zeros above the diagonal (L×L, row stride kLd).
void invert_unit_lower(const ChunkRows& x, const float* P, float* X);

// The pair products of one chunk (see the top of this file).
class DecayPairs {
 public:
  DecayPairs(Carver& carver, int64_t K);

  // Picks each sub-chunk's reference and scales the row and column operands. G: cumulative
  // decay, L×K.
  void prepare(const ChunkRows& x, const float* G);
  // After prepare(): Γ = e^G and exit = e^{G_L − G} (L×K), from the row and column factors of
  // dense sub-chunks (e^{R_i} times e^{G − R_i}: a factor that underflows stands for a decay
  // below e^{−87 + kMaxExponent}), then gq = [Γ⊙Q; Γ⊙K] (2L×K) and kbar = exit ⊙ K.
  void decays(float* gamma, float* gq, float* exit, float* kbar) const;
  // After prepare(): Aqk and Pkk (L×L, row stride kLd), zero outside their triangles.
  void products(float* Aqk, float* Pkk);
  // Scratch of backward(), carved by the backward's workspace (the forward needs none):
  // gradients w.r.t. the row operands qt, kt (L×K) and one sub-chunk's column operand kc.
  struct GradScratch {
    float *dqt, *dkt, *dkc;
    GradScratch(Carver& carver, int64_t K);
  };
  // After prepare(): adds the gradients reaching q and k through Aqk and Pkk, given dAqk and
  // dPkk zero outside their triangles. The k side splits by the sign of G in its factor: rows
  // (e^{+G_r}) go to dk_plus, columns (e^{−G_s}) to dk_minus, so that
  // dG = q ⊙ dq + k ⊙ (dk_plus − dk_minus).
  void backward(const float* dAqk, const float* dPkk, float* dq, float* dk_plus, float* dk_minus,
                const GradScratch& scratch);

 private:
  struct Sub {
    int64_t begin, end;
    bool dense;       // diagonal block as a tile (else pair by pair)
    int64_t columns;  // columns covered by the tile product: end when dense, else begin
    int64_t offset;   // first row of this sub-chunk's column operands in kc_, col_factor_
  };
  void scale_columns(const Sub& sub, const float* ref);
  void diagonal_pairs(const Sub& sub, float* Aqk, float* Pkk) const;
  void diagonal_pairs_backward(const Sub& sub, const float* dAqk, const float* dPkk, float* dq,
                               float* dk_plus, float* dk_minus) const;

  ChunkRows x_{};
  const float* G_ = nullptr;
  int64_t K_, num_subs_ = 0;
  Sub subs_[kChunk / kSub];
  float* refs_;        // [sub][K]: R_i
  float* row_factor_;  // [L][K]: e^{G_r − R_i} of the row's sub-chunk
  float *qt_, *kt_;    // [L][K]: q, k rows times row_factor
  // Column operands of every sub-chunk, sub-chunk i from row offset: e^{R_i − G_s} for s below
  // `columns`, and k times it.
  float *col_factor_, *kc_;
  float* kct_;  // [K][kLd]: one sub-chunk's kc transposed
  // In bf16, the right operand two pair products share (kct_, or kc in the backward), rounded
  // once for both.
  uint32_t* shared_rounded_;
  float *to_entry_, *to_exit_;  // [K]: e^{R_i}, e^{G_L − R_i} of one sub-chunk
};

// The products of a chunk's forward that its backward reads back rather than recomputes:
//   vt = Ṽ (L×V), r = V − (Γ⊙K) S (L×V), Aqk, Pkk and X = (I + Diag(β) Pkk)⁻¹ (L×L, stride kLd).
// The forward saves them after the chunk's entry state, in the chunk's record (delta_rule.h).
struct ChunkProducts {
  float *vt, *r, *Aqk, *Pkk, *X;
  static int64_t floats(int64_t V) { return 2 * kChunk * V + 3 * kChunk * kLd; }
  static ChunkProducts at(float* p, int64_t V) {
    return {p, p + kChunk * V, p + 2 * kChunk * V, p + 2 * kChunk * V + kChunk * kLd,
            p + 2 * kChunk * V + 2 * kChunk * kLd};
  }
};

// A chunk's elementwise factors, which forward and backward both compute:
//   G (cumulative decay), Γ = e^G, gq = [Γ⊙Q; Γ⊙K] (2L×K), exit = e^{G_L − G}, kbar = exit ⊙ K
//   (L×K), and the pair operands.
// From them and the entry state the forward computes the ChunkProducts (its workspace in
// delta_rule_chunk_forward.cpp holds what only it needs); the backward reads them back.
struct ChunkCore {
  float *G, *gamma, *gq, *exit, *kbar;
  DecayPairs pairs;
  ChunkCore(Carver& carver, int64_t K);
  void factors(const ChunkRows& x);
};

}  // namespace k3::kernels::kda::chunk
