#include <cmath>

#include "k3/kernels/reference.h"

namespace k3::ref {

template <typename T>
void sigmoid_gate_forward(const T* x, const T* g, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (T(1) + std::exp(-g[i]));
}

template <typename T>
void sigmoid_gate_backward(const T* x, const T* g, const T* dy, T* dx, T* dg, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T s = sigmoid(g[i]);
    dx[i] = dy[i] * s;
    dg[i] = dy[i] * x[i] * s * (T(1) - s);
  }
}

template void sigmoid_gate_forward<float>(const float*, const float*, float*, int64_t);
template void sigmoid_gate_forward<double>(const double*, const double*, double*, int64_t);
template void sigmoid_gate_backward<float>(const float*, const float*, const float*, float*, float*, int64_t);
template void sigmoid_gate_backward<double>(const double*, const double*, const double*, double*, double*,
                                            int64_t);

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, bool tanh) {
  const T pi = T(3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    y[i] = tanh ? T(0.5) * v * (T(1) + std::tanh(std::sqrt(T(2) / pi) * (v + T(0.044715) * v * v * v)))
                : T(0.5) * v * (T(1) + std::erf(v / std::sqrt(T(2))));
  }
}

template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n, bool tanh) {
  const T pi = T(3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    T d;
    if (tanh) {
      const T c = std::sqrt(T(2) / pi), t = std::tanh(c * (v + T(0.044715) * v * v * v));
      d = T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * v * v);
    } else {
      d = T(0.5) * (T(1) + std::erf(v / std::sqrt(T(2)))) + v * std::exp(-v * v / T(2)) / std::sqrt(T(2) * pi);
    }
    dx[i] = dy[i] * d;
  }
}

template void gelu_forward<float>(const float*, float*, int64_t, bool);
template void gelu_forward<double>(const double*, double*, int64_t, bool);
template void gelu_backward<float>(const float*, const float*, float*, int64_t, bool);
template void gelu_backward<double>(const double*, const double*, double*, int64_t, bool);

}  // namespace k3::ref
