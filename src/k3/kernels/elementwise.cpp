#include "k3/kernels/elementwise.h"

#include <cmath>
#include <utility>

namespace k3::kernels {

static inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void sigmoid(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
}

void add(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel if (n > 32768)
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, int64_t n) { add(acc, x, acc, n); }

void sigmoid_gate_forward(const float* x, const float* g, float* y, int64_t n) {
#pragma omp parallel if (n > 32768)
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid(g[i]);
}

void sigmoid_gate_backward(const float* x, const float* g, const float* dy, float* dx, float* dg,
                           int64_t n) {
#pragma omp parallel if (n > 32768)
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(g[i]);
    dx[i] = dy[i] * s;
    dg[i] = dy[i] * x[i] * s * (1.0f - s);
  }
}

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f, kTanhCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f, kInvSqrt2Pi = 0.3989422804014327f;

// (y, dy/dx) of GELU at x.
inline std::pair<float, float> gelu(float x, bool tanh_form) {
  if (tanh_form) {
    const float u = kSqrt2OverPi * (x + kTanhCubic * x * x * x), t = std::tanh(u);
    const float du = kSqrt2OverPi * (1.f + 3.f * kTanhCubic * x * x);
    return {0.5f * x * (1.f + t), 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * du};
  }
  const float cdf = 0.5f * (1.f + std::erf(x * kInvSqrt2));
  return {x * cdf, cdf + x * kInvSqrt2Pi * std::exp(-0.5f * x * x)};
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n, bool tanh) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i], tanh).first;
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * gelu(x[i], tanh).second;
}

}  // namespace k3::kernels
