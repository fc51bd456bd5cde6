#include <cmath>

#include "k3/kernels/reference.h"

namespace k3::ref {

template <typename T>
void adamw_step(const kernels::AdamWParams& p, T* param, const T* grad, T* m, T* v, int64_t n) {
  const T b1 = p.beta1, b2 = p.beta2, t = T(p.step);
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i] * T(p.grad_scale);
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    const T m_hat = m[i] / (1 - std::pow(b1, t));
    const T v_hat = v[i] / (1 - std::pow(b2, t));
    param[i] -= T(p.lr) * (m_hat / (std::sqrt(v_hat) + T(p.eps)) + T(p.weight_decay) * param[i]);
  }
}

template void adamw_step<float>(const kernels::AdamWParams&, float*, const float*, float*, float*,
                                int64_t);
template void adamw_step<double>(const kernels::AdamWParams&, double*, const double*, double*,
                                 double*, int64_t);

}  // namespace k3::ref
