// The decayed pair products of a chunk (see chunk_tiles.h).
#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/fast_math.h"
#include "k3/kernels/kda/chunk_tiles.h"

namespace k3::kernels::kda::chunk {

using attn::Band;
using attn::tile_gemm;
using attn::transpose;

DecayPairs::DecayPairs(Carver& carver, int64_t K) : K_(K) {
  const int64_t n = kChunk * K, columns = kChunk * (kChunk / kSub + 1) / 2 * K;
  refs_ = carver.take(kChunk / kSub * K);
  row_factor_ = carver.take(n);
  qt_ = carver.take(n);
  kt_ = carver.take(n);
  col_factor_ = carver.take(columns);
  kc_ = carver.take(columns);
  kct_ = carver.take(K * kLd);
  shared_rounded_ = reinterpret_cast<uint32_t*>(
      carver.take(std::max(attn::rounded_words(K, kLd), attn::rounded_words(kLd, K))));
  to_entry_ = carver.take(K);
  to_exit_ = carver.take(K);
}

DecayPairs::GradScratch::GradScratch(Carver& carver, int64_t K)
    : dqt(carver.take(kChunk * K)), dkt(carver.take(kChunk * K)), dkc(carver.take(kChunk * K)) {}

void DecayPairs::prepare(const ChunkRows& x, const float* G) {
  x_ = x;
  G_ = G;
  const int64_t K = K_;
  num_subs_ = (x.L + kSub - 1) / kSub;
  int64_t offset = 0;
  for (int64_t i = 0; i < num_subs_; ++i) {
    Sub& sub = subs_[i];
    sub.begin = i * kSub;
    sub.end = std::min(x.L, sub.begin + kSub);
    const int64_t mid = (sub.begin + sub.end - 1) / 2;
    const float *first = G + sub.begin * K, *middle = G + mid * K, *last = G + (sub.end - 1) * K;
    float span = 0;
    for (int64_t c = 0; c < K; ++c)
      span = std::max({span, first[c] - middle[c], middle[c] - last[c]});
    sub.dense = span <= kMaxExponent;
    sub.columns = sub.dense ? sub.end : sub.begin;
    sub.offset = offset;
    offset += sub.columns;
    float* ref = refs_ + i * K;
    if (sub.dense)
      std::copy(middle, middle + K, ref);
    else if (sub.begin > 0)
      std::copy(G + (sub.begin - 1) * K, G + sub.begin * K, ref);
    else
      std::fill(ref, ref + K, 0.0f);  // the chunk's entry: G = 0
    for (int64_t r = sub.begin; r < sub.end; ++r) {
      const float *q = x.q + r * x.ldqk, *k = x.k + r * x.ldqk, *Gr = G + r * K;
      float *f = row_factor_ + r * K, *qt = qt_ + r * K, *kt = kt_ + r * K;
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        f[c] = fast::exp(Gr[c] - ref[c]);
        qt[c] = q[c] * f[c];
        kt[c] = k[c] * f[c];
      }
    }
    scale_columns(sub, ref);
  }
}

// Columns of earlier sub-chunks take e^{R_i − G_s}; a dense sub-chunk's own columns take the
// reciprocals of its row factors (e^{G_s − R_i} within e^{±kMaxExponent}).
void DecayPairs::scale_columns(const Sub& sub, const float* ref) {
  const int64_t K = K_;
  for (int64_t s = 0; s < sub.columns; ++s) {
    const float *k = x_.k + s * x_.ldqk, *Gs = G_ + s * K, *own = row_factor_ + s * K;
    float *f = col_factor_ + (sub.offset + s) * K, *kc = kc_ + (sub.offset + s) * K;
    if (s < sub.begin) {
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        f[c] = fast::exp(ref[c] - Gs[c]);
        kc[c] = k[c] * f[c];
      }
    } else {
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        f[c] = 1.0f / own[c];
        kc[c] = k[c] * f[c];
      }
    }
  }
}

void DecayPairs::decays(float* gamma, float* gq, float* exit, float* kbar) const {
  const int64_t L = x_.L, K = K_;
  const float* G_last = G_ + (L - 1) * K;
  for (int64_t i = 0; i < num_subs_; ++i) {
    const Sub& sub = subs_[i];
    const float* ref = refs_ + i * K;
    if (sub.dense) {
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        to_entry_[c] = fast::exp(ref[c]);
        to_exit_[c] = fast::exp(G_last[c] - ref[c]);
      }
    }
    for (int64_t r = sub.begin; r < sub.end; ++r) {
      const float *q = x_.q + r * x_.ldqk, *k = x_.k + r * x_.ldqk, *Gr = G_ + r * K;
      const float *rf = row_factor_ + r * K, *cf = col_factor_ + (sub.offset + r) * K;
      float *gr = gamma + r * K, *e = exit + r * K;
      if (sub.dense) {
#pragma omp simd
        for (int64_t c = 0; c < K; ++c) {
          gr[c] = to_entry_[c] * rf[c];
          e[c] = to_exit_[c] * cf[c];
        }
      } else {
#pragma omp simd
        for (int64_t c = 0; c < K; ++c) {
          gr[c] = fast::exp(Gr[c]);
          e[c] = fast::exp(G_last[c] - Gr[c]);
        }
      }
      float *gqr = gq + r * K, *gkr = gq + (L + r) * K, *kb = kbar + r * K;
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        gqr[c] = gr[c] * q[c];
        gkr[c] = gr[c] * k[c];
        kb[c] = e[c] * k[c];
      }
    }
  }
}

void DecayPairs::products(float* Aqk, float* Pkk) {
  const int64_t L = x_.L, K = K_;
  for (int64_t r = 0; r < L; ++r) {
    std::fill(Aqk + r * kLd, Aqk + r * kLd + L, 0.0f);
    std::fill(Pkk + r * kLd, Pkk + r * kLd + L, 0.0f);
  }
  for (int64_t i = 0; i < num_subs_; ++i) {
    const Sub& sub = subs_[i];
    const int64_t rows = sub.end - sub.begin, n = sub.columns, b = sub.begin;
    if (n > 0) {  // only s ≤ r (Aqk) and s < r (Pkk) are needed
      transpose(n, K, kc_ + sub.offset * K, K, kct_, kLd);
      const attn::RoundedRhs kct =
          attn::round_rhs({kct_, kLd}, K, n, shared_rounded_, x_.precision);
      tile_gemm({rows, n, K}, {qt_ + b * K, K, false}, {kct_, kLd, &kct},
                {Aqk + b * kLd, kLd, false}, {Band::ColLe, b}, x_.precision);
      tile_gemm({rows, n, K}, {kt_ + b * K, K, false}, {kct_, kLd, &kct},
                {Pkk + b * kLd, kLd, false}, {Band::ColLe, b - 1}, x_.precision);
    }
    if (sub.dense) {  // the tile may also have filled the diagonal block's upper part
      for (int64_t r = sub.begin; r < sub.end; ++r) {
        std::fill(Aqk + r * kLd + r + 1, Aqk + r * kLd + sub.end, 0.0f);
        std::fill(Pkk + r * kLd + r, Pkk + r * kLd + sub.end, 0.0f);
      }
    } else {
      diagonal_pairs(sub, Aqk, Pkk);
    }
  }
}

void DecayPairs::diagonal_pairs(const Sub& sub, float* Aqk, float* Pkk) const {
  const int64_t K = K_;
  for (int64_t r = sub.begin; r < sub.end; ++r) {
    const float *q = x_.q + r * x_.ldqk, *kr = x_.k + r * x_.ldqk, *Gr = G_ + r * K;
    for (int64_t s = sub.begin; s <= r; ++s) {
      const float *ks = x_.k + s * x_.ldqk, *Gs = G_ + s * K;
      float aq = 0, ak = 0;
#pragma omp simd reduction(+ : aq, ak)
      for (int64_t c = 0; c < K; ++c) {
        const float e = fast::exp(Gr[c] - Gs[c]) * ks[c];
        aq += q[c] * e;
        ak += kr[c] * e;
      }
      Aqk[r * kLd + s] = aq;
      Pkk[r * kLd + s] = s < r ? ak : 0.0f;
    }
  }
}

void DecayPairs::backward(const float* dAqk, const float* dPkk, float* dq, float* dk_plus,
                          float* dk_minus, const GradScratch& scratch) {
  const int64_t K = K_;
  for (int64_t i = 0; i < num_subs_; ++i) {
    const Sub& sub = subs_[i];
    const int64_t rows = sub.end - sub.begin, n = sub.columns, b = sub.begin;
    const float* kc = kc_ + sub.offset * K;
    const attn::RoundedRhs kc_rounded =
        attn::round_rhs({kc, K}, n, K, shared_rounded_, x_.precision);
    // Row operands: dqt = dAqk · kc, dkt = dPkk · kc (terms s ≤ r, s < r).
    tile_gemm({rows, K, n}, {dAqk + b * kLd, kLd, false}, {kc, K, &kc_rounded},
              {scratch.dqt + b * K, K, false}, {Band::KLe, b}, x_.precision);
    tile_gemm({rows, K, n}, {dPkk + b * kLd, kLd, false}, {kc, K, &kc_rounded},
              {scratch.dkt + b * K, K, false}, {Band::KLe, b - 1}, x_.precision);
    if (n > 0) {
      // Column operand: dkc = dAqkᵀ · qt + dPkkᵀ · kt over this sub-chunk's rows r ≥ s, r > s.
      tile_gemm({n, K, rows}, {dAqk + b * kLd, kLd, true}, {qt_ + b * K, K},
                {scratch.dkc, K, false}, {Band::KGe, -b}, x_.precision);
      tile_gemm({n, K, rows}, {dPkk + b * kLd, kLd, true}, {kt_ + b * K, K}, {scratch.dkc, K, true},
                {Band::KGe, 1 - b}, x_.precision);
      for (int64_t s = 0; s < n; ++s) {
        const float *f = col_factor_ + (sub.offset + s) * K, *d = scratch.dkc + s * K;
        float* out = dk_minus + s * K;
#pragma omp simd
        for (int64_t c = 0; c < K; ++c) out[c] += f[c] * d[c];
      }
    }
    if (!sub.dense) diagonal_pairs_backward(sub, dAqk, dPkk, dq, dk_plus, dk_minus);
  }
  for (int64_t r = 0; r < x_.L; ++r) {
    const float *f = row_factor_ + r * K, *dqt = scratch.dqt + r * K, *dkt = scratch.dkt + r * K;
    float *dqr = dq + r * K, *dkr = dk_plus + r * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) {
      dqr[c] += f[c] * dqt[c];
      dkr[c] += f[c] * dkt[c];
    }
  }
}

void DecayPairs::diagonal_pairs_backward(const Sub& sub, const float* dAqk, const float* dPkk,
                                         float* dq, float* dk_plus, float* dk_minus) const {
  const int64_t K = K_;
  for (int64_t r = sub.begin; r < sub.end; ++r) {
    const float *q = x_.q + r * x_.ldqk, *kr = x_.k + r * x_.ldqk, *Gr = G_ + r * K;
    float *dqr = dq + r * K, *dkr = dk_plus + r * K;
    for (int64_t s = sub.begin; s <= r; ++s) {
      const float *ks = x_.k + s * x_.ldqk, *Gs = G_ + s * K;
      const float wq = dAqk[r * kLd + s], wk = dPkk[r * kLd + s];
      float* dks = dk_minus + s * K;
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        const float e = fast::exp(Gr[c] - Gs[c]);
        dqr[c] += wq * e * ks[c];
        dkr[c] += wk * e * ks[c];
        dks[c] += (wq * q[c] + wk * kr[c]) * e;
      }
    }
  }
}

}  // namespace k3::kernels::kda::chunk
