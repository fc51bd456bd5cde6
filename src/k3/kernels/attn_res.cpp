#include "k3/kernels/attn_res.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace k3::kernels {
namespace {

inline float dot(const float* a, const float* b, int64_t d) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

// Per token: rho_i and <Z_i, w> for every row.
inline void scores(const AttnResArgs& a, const float* w, int64_t t, float* rho, float* zw) {
  for (int64_t i = 0; i < a.n; ++i) {
    const float* z = a.rows[i] + t * a.d;
    rho[i] = 1.0f / std::sqrt(dot(z, z, a.d) / static_cast<float>(a.d) + a.eps);
    zw[i] = dot(z, w, a.d);
  }
}

std::vector<float> combined_weight(const AttnResArgs& a) {
  std::vector<float> w(static_cast<size_t>(a.d));
  for (int64_t c = 0; c < a.d; ++c) w[static_cast<size_t>(c)] = a.norm_weight[c] * a.proj_weight[c];
  return w;
}

}  // namespace

void attn_res_forward(const AttnResArgs& a, float* out, float* alpha) {
  const std::vector<float> w = combined_weight(a);
#pragma omp parallel
  {
    std::vector<float> rho(static_cast<size_t>(a.n)), zw(static_cast<size_t>(a.n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < a.N; ++t) {
      scores(a, w.data(), t, rho.data(), zw.data());
      float* al = alpha + t * a.n;
      float mx = -INFINITY;
      for (int64_t i = 0; i < a.n; ++i) mx = std::max(mx, al[i] = rho[i] * zw[i]);
      float sum = 0;
      for (int64_t i = 0; i < a.n; ++i) sum += al[i] = std::exp(al[i] - mx);
      for (int64_t i = 0; i < a.n; ++i) al[i] /= sum;
      float* o = out + t * a.d;
      std::fill(o, o + a.d, 0.0f);
      for (int64_t i = 0; i < a.n; ++i) {
        const float* z = a.rows[i] + t * a.d;
        const float ai = al[i];
#pragma omp simd
        for (int64_t c = 0; c < a.d; ++c) o[c] += ai * z[c];
      }
    }
  }
}

// dℓ_i = α_i (⟨dout, Z_i⟩ − Σ_j α_j ⟨dout, Z_j⟩); dZ_i += α_i dout + dℓ_i ρ_i (w − ⟨Z_i,w⟩ ρ_i² Z_i / d);
// dw = Σ_t Σ_i dℓ_i ρ_i Z_i, summed per column in token order (deterministic).
void attn_res_backward(const AttnResArgs& a, const float* alpha, const float* dout, float* const* d_rows,
                       float* d_norm_weight, float* d_proj_weight, float* scratch) {
  const std::vector<float> w = combined_weight(a);
  const float inv_d = 1.0f / static_cast<float>(a.d);
#pragma omp parallel
  {
    std::vector<float> rho(static_cast<size_t>(a.n)), zw(static_cast<size_t>(a.n)), da(static_cast<size_t>(a.n));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < a.N; ++t) {
      scores(a, w.data(), t, rho.data(), zw.data());
      const float* al = alpha + t * a.n;
      const float* g = dout + t * a.d;
      float mean = 0;
      for (int64_t i = 0; i < a.n; ++i) mean += al[i] * (da[i] = dot(g, a.rows[i] + t * a.d, a.d));
      for (int64_t i = 0; i < a.n; ++i) {
        const float dl = al[i] * (da[i] - mean);
        const float* z = a.rows[i] + t * a.d;
        float* dz = d_rows[i] + t * a.d;
        const float ai = al[i], cw = dl * rho[i], cz = -dl * zw[i] * rho[i] * rho[i] * rho[i] * inv_d;
#pragma omp simd
        for (int64_t c = 0; c < a.d; ++c) dz[c] += ai * g[c] + cw * w[static_cast<size_t>(c)] + cz * z[c];
        scratch[t * a.n + i] = cw;
      }
    }
    // Column blocks: each thread owns whole columns, so the sums keep one order on any thread count.
    constexpr int64_t kCols = 64;
#pragma omp for schedule(static)
    for (int64_t c0 = 0; c0 < a.d; c0 += kCols) {
      const int64_t width = std::min(kCols, a.d - c0);
      float dw[kCols] = {};
      for (int64_t t = 0; t < a.N; ++t)
        for (int64_t i = 0; i < a.n; ++i) {
          const float coef = scratch[t * a.n + i];
          const float* z = a.rows[i] + t * a.d + c0;
#pragma omp simd
          for (int64_t c = 0; c < width; ++c) dw[c] += coef * z[c];
        }
      for (int64_t c = 0; c < width; ++c) {
        d_proj_weight[c0 + c] += dw[c] * a.norm_weight[c0 + c];
        d_norm_weight[c0 + c] += dw[c] * a.proj_weight[c0 + c];
      }
    }
  }
}

}  // namespace k3::kernels
