#include "k3/kernels/attention_block.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "k3/kernels/gemm.h"

namespace k3::kernels {
namespace {

constexpr int64_t kRows = 64;  // queries per score tile: the tile is [kRows, Tk]

// Scores of queries [i0, i0 + n) of (b, h) against every key: scale (q_n k_nᵀ + q_r k_rᵀ).
void scores(const AttentionShape& s, int64_t Tq, int64_t Tk, const float* q, const float* k,
            const float* kr, int64_t b, int64_t h, int64_t i0, int64_t n, float scale, float* S) {
  const int64_t dq = s.dqk + s.dr, H = s.H;
  const float* qb = q + ((b * Tq + i0) * H + h) * dq;
  gemm({false, true, n, Tk, s.dqk, scale, qb, H * dq, k + (b * Tk * H + h) * s.dqk, H * s.dqk, 0.f,
        S, Tk, s.precision});
  if (s.dr > 0)
    gemm({false, true, n, Tk, s.dr, scale, qb + s.dqk, H * dq, kr + b * Tk * s.dr, s.dr, 1.f, S, Tk,
          s.precision});
}

}  // namespace

void attention_block_forward(const AttentionShape& s, int64_t Tq, int64_t Tk, const float* q,
                             const float* k, const float* kr, const float* v, float* out,
                             float* lse) {
  const float scale = s.effective_scale();
  const int64_t H = s.H;
#pragma omp parallel
  {
    std::vector<float> S(static_cast<size_t>(kRows * Tk));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i0 = 0; i0 < Tq; i0 += kRows) {
          const int64_t n = std::min(kRows, Tq - i0);
          scores(s, Tq, Tk, q, k, kr, b, h, i0, n, scale, S.data());
          for (int64_t i = 0; i < n; ++i) {
            float* row = S.data() + i * Tk;
            const float m = *std::max_element(row, row + Tk);
            double l = 0;
            for (int64_t j = 0; j < Tk; ++j) l += row[j] = std::exp(row[j] - m);
            for (int64_t j = 0; j < Tk; ++j) row[j] = static_cast<float>(row[j] / l);
            lse[(b * H + h) * Tq + i0 + i] = m + static_cast<float>(std::log(l));
          }
          gemm({false, false, n, s.dv, Tk, 1.f, S.data(), Tk, v + (b * Tk * H + h) * s.dv, H * s.dv,
                0.f, out + ((b * Tq + i0) * H + h) * s.dv, H * s.dv, s.precision});
        }
  }
}

void attention_merge(int64_t B, int64_t Tq, int64_t H, int64_t dv, float* out, float* lse,
                     const float* out2, const float* lse2) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        float& l = lse[(b * H + h) * Tq + i];
        const float l2 = lse2[(b * H + h) * Tq + i], m = std::max(l, l2);
        const float merged = m + std::log(std::exp(l - m) + std::exp(l2 - m));
        const float w1 = std::exp(l - merged), w2 = std::exp(l2 - merged);
        float* o = out + ((b * Tq + i) * H + h) * dv;
        const float* o2 = out2 + ((b * Tq + i) * H + h) * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] = w1 * o[c] + w2 * o2[c];
        l = merged;
      }
}

// Per (b, h): P = exp(S − lse), dV += Pᵀ dO, dP = dO Vᵀ, dS = scale P ∘ (dP − D),
// dQ += dS K, dK += dSᵀ Q (the shared k_r part summed over heads). Heads write disjoint dq, dk,
// dv rows; dkr is shared by the heads of a batch row, so it is accumulated per batch row after
// the heads, in head order.
void attention_block_backward(const AttentionShape& s, int64_t Tq, int64_t Tk, const float* q,
                              const float* k, const float* kr, const float* v, const float* out,
                              const float* lse, const float* dout, float* dq, float* dk, float* dkr,
                              float* dv) {
  const float scale = s.effective_scale();
  const int64_t H = s.H, dqd = s.dqk + s.dr;
  for (int64_t b = 0; b < s.B; ++b) {
    std::vector<float> dkr_heads(s.dr > 0 ? static_cast<size_t>(H * Tk * s.dr) : 0, 0.f);
#pragma omp parallel
    {
      std::vector<float> P(static_cast<size_t>(kRows * Tk)), dP(P.size());
#pragma omp for schedule(static)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i0 = 0; i0 < Tq; i0 += kRows) {
          const int64_t n = std::min(kRows, Tq - i0);
          scores(s, Tq, Tk, q, k, kr, b, h, i0, n, scale, P.data());
          const float* dob = dout + ((b * Tq + i0) * H + h) * s.dv;
          const float* ob = out + ((b * Tq + i0) * H + h) * s.dv;
          gemm({false, true, n, Tk, s.dv, 1.f, dob, H * s.dv, v + (b * Tk * H + h) * s.dv, H * s.dv,
                0.f, dP.data(), Tk, s.precision});
          for (int64_t i = 0; i < n; ++i) {
            const float l = lse[(b * H + h) * Tq + i0 + i];
            float D = 0;
            for (int64_t c = 0; c < s.dv; ++c) D += dob[i * H * s.dv + c] * ob[i * H * s.dv + c];
            for (int64_t j = 0; j < Tk; ++j) {
              float& p = P[static_cast<size_t>(i * Tk + j)];
              p = std::exp(p - l);
              float& d = dP[static_cast<size_t>(i * Tk + j)];
              d = scale * p * (d - D);
            }
          }
          gemm({true, false, Tk, s.dv, n, 1.f, P.data(), Tk, dob, H * s.dv, 1.f,
                dv + (b * Tk * H + h) * s.dv, H * s.dv, s.precision});
          float* dqb = dq + ((b * Tq + i0) * H + h) * dqd;
          const float* qb = q + ((b * Tq + i0) * H + h) * dqd;
          gemm({false, false, n, s.dqk, Tk, 1.f, dP.data(), Tk, k + (b * Tk * H + h) * s.dqk,
                H * s.dqk, 1.f, dqb, H * dqd, s.precision});
          gemm({true, false, Tk, s.dqk, n, 1.f, dP.data(), Tk, qb, H * dqd, 1.f,
                dk + (b * Tk * H + h) * s.dqk, H * s.dqk, s.precision});
          if (s.dr > 0) {
            gemm({false, false, n, s.dr, Tk, 1.f, dP.data(), Tk, kr + b * Tk * s.dr, s.dr, 1.f,
                  dqb + s.dqk, H * dqd, s.precision});
            gemm({true, false, Tk, s.dr, n, 1.f, dP.data(), Tk, qb + s.dqk, H * dqd, 1.f,
                  dkr_heads.data() + h * Tk * s.dr, s.dr, s.precision});
          }
        }
    }
    for (int64_t h = 0; h < H && s.dr > 0; ++h)
      for (int64_t i = 0; i < Tk * s.dr; ++i)
        dkr[b * Tk * s.dr + i] += dkr_heads[static_cast<size_t>(h * Tk * s.dr + i)];
  }
}

}  // namespace k3::kernels
