#include "k3/kernels/adamw.h"

#include <cmath>

#include "k3/base/error.h"
#include "k3/kernels/fast_math.h"

namespace k3::kernels {

void adamw_step(const AdamWParams& p, float* param, const float* grad, float* m, float* v,
                int64_t n) {
  K3_CHECK(p.step >= 1, "adamw: step must be 1-based, got ", p.step);
  const float b1 = p.beta1, b2 = p.beta2, gs = p.grad_scale, eps = p.eps;
  const float lr = p.lr, wd = p.weight_decay;
  // m̂ = m / (1 - b1^t), v̂ = v / (1 - b2^t); folded into two scalars.
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(double{b1}, double(p.step))));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(double{b2}, double(p.step))));
#pragma omp parallel if (n > (1 << 15))
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * c1 / (fast::sqrt(vi * c2) + eps) + wd * param[i]);
  }
}

}  // namespace k3::kernels
