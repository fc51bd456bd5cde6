#include "k3/kernels/kda/gate.h"

#include <cmath>
#include <vector>

#include "k3/kernels/column_split.h"
#include "k3/kernels/kda/rows.h"

namespace k3::kernels::kda {

void gate_forward(const GateParams& p, const float* f, const float* A_log, const float* dt_bias,
                  float* g) {
  const int64_t P = p.H * p.D;
#pragma omp parallel for collapse(2) schedule(static) if (p.rows * P > 32768)
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t h = 0; h < p.H; ++h) {
      const int64_t off = r * P + h * p.D;
      rows::gate_row(p, std::exp(A_log[h]), f + off, dt_bias + h * p.D, g + off);
    }
}

// With z = f + dt_bias and a = exp(A_log):
//   bounded, u = a z:  ∂g/∂z = lb σ(u)(1 − σ(u)) a,   ∂g/∂A_log = lb σ(u)(1 − σ(u)) u
//   unbounded:         ∂g/∂z = −a σ(z),                ∂g/∂A_log = g
// Each thread owns whole columns of [rows, H·D] and sums them over rows in order; the per-head
// sums over a head's columns follow, serially.
void gate_backward(const GateParams& p, const float* f, const float* A_log, const float* dt_bias,
                   const float* dg, float* df, float* dA_log, float* ddt_bias) {
  const int64_t P = p.H * p.D;
  std::vector<float> buffer(static_cast<size_t>(3 * P), 0.0f);
  float *a = buffer.data(), *dz_sum = a + P, *da_sum = dz_sum + P;  // per column
  for (int64_t c = 0; c < P; ++c) a[c] = std::exp(A_log[c / p.D]);
#pragma omp parallel if (p.rows * P > 32768)
  {
    const ColumnRange cols = thread_columns(P);
    for (int64_t r = 0; r < p.rows; ++r) {
      const float *fr = f + r * P, *dgr = dg + r * P;
      float* dfr = df + r * P;
      if (p.bounded) {
#pragma omp simd
        for (int64_t c = cols.begin; c < cols.end; ++c) {
          const float u = a[c] * (fr[c] + dt_bias[c]);
          const fast::SigmoidPair s = fast::sigmoid_pair(u);
          const float du = dgr[c] * p.lower_bound * s.s * s.c;
          dfr[c] = du * a[c];
          dz_sum[c] += dfr[c];
          da_sum[c] += du * u;
        }
      } else {
        for (int64_t c = cols.begin; c < cols.end; ++c) {
          const float z = fr[c] + dt_bias[c], ac = a[c];
          dfr[c] = -dgr[c] * ac * fast::sigmoid(z);
          dz_sum[c] += dfr[c];
          da_sum[c] += dgr[c] * -ac * rows::softplus(z);
        }
      }
    }
  }
  for (int64_t c = 0; c < P; ++c) ddt_bias[c] += dz_sum[c];
  for (int64_t h = 0; h < p.H; ++h) {
    float s = 0;
    for (int64_t c = h * p.D; c < (h + 1) * p.D; ++c) s += da_sum[c];
    dA_log[h] += s;
  }
}

}  // namespace k3::kernels::kda
