// Per-row pieces of the KDA kernels, shared by the batched kernels and the fused decode step so
// that both compute the same thing in the same order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "k3/kernels/fast_math.h"
#include "k3/kernels/kda/gate.h"

namespace k3::kernels::kda::rows {

inline float silu(float z) { return z * fast::sigmoid(z); }

// softplus(z) = log(1 + e^z) without overflow.
inline float softplus(float z) { return std::max(z, 0.0f) + std::log1p(fast::exp(-std::fabs(z))); }

// One head's log-decay g[0, D) from f (gate.h); a = exp(A_log[h]).
inline void gate_row(const GateParams& p, float a, const float* f, const float* dt_bias, float* g) {
  if (p.bounded) {
#pragma omp simd
    for (int64_t c = 0; c < p.D; ++c) g[c] = p.lower_bound * fast::sigmoid(a * (f[c] + dt_bias[c]));
  } else {
    for (int64_t c = 0; c < p.D; ++c) g[c] = -a * softplus(f[c] + dt_bias[c]);
  }
}

// y = scale · x / sqrt(Σx² + eps); returns r = 1/sqrt(Σx² + eps).
inline float l2norm_row(const float* x, float* y, int64_t dim, float scale, float eps) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < dim; ++j) ss += x[j] * x[j];
  const float r = 1.0f / std::sqrt(ss + eps);
  const float m = scale * r;
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) y[j] = x[j] * m;
  return r;
}

// y = o / sqrt(mean(o²) + eps) ⊙ w ⊙ sigmoid(gate); returns rstd = 1/sqrt(mean(o²) + eps).
inline float gated_rmsnorm_row(const float* o, const float* w, const float* gate, float* y,
                               int64_t dim, float eps) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < dim; ++j) ss += o[j] * o[j];
  const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) y[j] = o[j] * rstd * w[j] * fast::sigmoid(gate[j]);
  return rstd;
}

}  // namespace k3::kernels::kda::rows
