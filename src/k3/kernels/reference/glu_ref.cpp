#include <cmath>

#include "k3/kernels/reference.h"

namespace k3::ref {

template <typename T>
void glu_forward(const kernels::GluParams& p, const T* g, const T* u, T* h, int64_t n) {
  const T b1 = p.beta1, b2 = p.beta2;
  for (int64_t i = 0; i < n; ++i) {
    if (p.kind == kernels::GluKind::SiLU)
      h[i] = g[i] * sigmoid(g[i]) * u[i];
    else
      h[i] = b1 * std::tanh(g[i] / b1) * sigmoid(g[i]) * b2 * std::tanh(u[i] / b2);
  }
}

template <typename T>
void glu_backward(const kernels::GluParams& p, const T* g, const T* u, const T* dh, T* dg, T* du,
                  int64_t n) {
  const T b1 = p.beta1, b2 = p.beta2;
  for (int64_t i = 0; i < n; ++i) {
    const T s = sigmoid(g[i]);
    T act, dact, up, dup;  // h = act(g) * up(u)
    if (p.kind == kernels::GluKind::SiLU) {
      act = g[i] * s;
      dact = s + g[i] * s * (1 - s);
      up = u[i];
      dup = 1;
    } else {
      const T t1 = std::tanh(g[i] / b1), t2 = std::tanh(u[i] / b2);
      act = b1 * t1 * s;
      dact = (1 - t1 * t1) * s + b1 * t1 * s * (1 - s);
      up = b2 * t2;
      dup = 1 - t2 * t2;
    }
    dg[i] = dh[i] * dact * up;
    du[i] = dh[i] * act * dup;
  }
}

template void glu_forward<float>(const kernels::GluParams&, const float*, const float*, float*,
                                 int64_t);
template void glu_forward<double>(const kernels::GluParams&, const double*, const double*, double*,
                                  int64_t);
template void glu_backward<float>(const kernels::GluParams&, const float*, const float*,
                                  const float*, float*, float*, int64_t);
template void glu_backward<double>(const kernels::GluParams&, const double*, const double*,
                                   const double*, double*, double*, int64_t);

}  // namespace k3::ref
