#include <cmath>

#include "k3/kernels/kda/reference.h"
#include "k3/kernels/reference.h"

namespace k3::ref::kda {

using kernels::kda::GateParams;

template <typename T>
static T softplus(T x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

template <typename T>
void gate_forward(const GateParams& p, const T* f, const T* A_log, const T* dt_bias, T* g) {
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t c = 0; c < p.D; ++c) {
        const int64_t i = (r * p.H + h) * p.D + c;
        const T a = std::exp(A_log[h]), z = f[i] + dt_bias[h * p.D + c];
        g[i] = p.bounded ? T(p.lower_bound) * sigmoid(a * z) : -a * softplus(z);
      }
}

template <typename T>
void gate_backward(const GateParams& p, const T* f, const T* A_log, const T* dt_bias, const T* dg,
                   T* df, T* dA_log, T* ddt_bias) {
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t c = 0; c < p.D; ++c) {
        const int64_t i = (r * p.H + h) * p.D + c;
        const T a = std::exp(A_log[h]), z = f[i] + dt_bias[h * p.D + c];
        T dz, da;  // ∂g/∂z and ∂g/∂A_log (∂a/∂A_log = a)
        if (p.bounded) {
          const T s = sigmoid(a * z), dsig = T(p.lower_bound) * s * (T(1) - s);
          dz = dsig * a;
          da = dsig * a * z;
        } else {
          dz = -a * sigmoid(z);
          da = -a * softplus(z);
        }
        df[i] = dg[i] * dz;
        ddt_bias[h * p.D + c] += dg[i] * dz;
        dA_log[h] += dg[i] * da;
      }
}

#define K3_INSTANTIATE(T)                                                                       \
  template void gate_forward<T>(const GateParams&, const T*, const T*, const T*, T*);           \
  template void gate_backward<T>(const GateParams&, const T*, const T*, const T*, const T*, T*, \
                                 T*, T*);
K3_INSTANTIATE(float)
K3_INSTANTIATE(double)
#undef K3_INSTANTIATE

}  // namespace k3::ref::kda
