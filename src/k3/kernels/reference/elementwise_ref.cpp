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

}  // namespace k3::ref
