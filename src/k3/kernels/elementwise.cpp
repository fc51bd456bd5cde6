#include "k3/kernels/elementwise.h"

#include <cmath>

namespace k3::kernels {

static inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void sigmoid(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
}

void add(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, int64_t n) { add(acc, x, acc, n); }

void sigmoid_gate_forward(const float* x, const float* g, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid(g[i]);
}

void sigmoid_gate_backward(const float* x, const float* g, const float* dy, float* dx, float* dg,
                           int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(g[i]);
    dx[i] = dy[i] * s;
    dg[i] = dy[i] * x[i] * s * (1.0f - s);
  }
}

}  // namespace k3::kernels
