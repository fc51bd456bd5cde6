#include "k3/kernels/glu.h"

#include "k3/kernels/fast_math.h"

namespace k3::kernels {

// Below this many elements a parallel region costs more than it saves.
static constexpr int64_t kParallelMin = 1 << 15;

void glu_forward(const GluParams& p, const float* g, const float* u, float* h, int64_t n) {
  if (p.kind == GluKind::SiLU) {
#pragma omp parallel if (n > kParallelMin)
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) h[i] = g[i] * fast::sigmoid(g[i]) * u[i];
    return;
  }
  const float b1 = p.beta1, b2 = p.beta2, ib1 = 1.0f / b1, ib2 = 1.0f / b2;
#pragma omp parallel if (n > kParallelMin)
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i)
    h[i] = b1 * fast::tanh(g[i] * ib1) * fast::sigmoid(g[i]) * (b2 * fast::tanh(u[i] * ib2));
}

// With s = sigmoid(g), c = 1 - s:
// SiLU: silu'(g) = s (1 + g c).
// SiTU: a(g) = b1 t1 s with t1 = tanh(g/b1): a' = (1 - t1²) s + a c;
//       l(u) = b2 t2 with t2 = tanh(u/b2):    l' = 1 - t2².
void glu_backward(const GluParams& p, const float* g, const float* u, const float* dh, float* dg,
                  float* du, int64_t n) {
  if (p.kind == GluKind::SiLU) {
#pragma omp parallel if (n > kParallelMin)
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const fast::SigmoidPair sg = fast::sigmoid_pair(g[i]);
      dg[i] = dh[i] * u[i] * (sg.s + g[i] * sg.s * sg.c);
      du[i] = dh[i] * g[i] * sg.s;
    }
    return;
  }
  const float b1 = p.beta1, b2 = p.beta2, ib1 = 1.0f / b1, ib2 = 1.0f / b2;
#pragma omp parallel if (n > kParallelMin)
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const fast::SigmoidPair sg = fast::sigmoid_pair(g[i]);
    const fast::TanhPair t1 = fast::tanh_pair(g[i] * ib1), t2 = fast::tanh_pair(u[i] * ib2);
    const float a = b1 * t1.t * sg.s;
    dg[i] = dh[i] * b2 * t2.t * (t1.d * sg.s + a * sg.c);
    du[i] = dh[i] * a * t2.d;
  }
}

}  // namespace k3::kernels
