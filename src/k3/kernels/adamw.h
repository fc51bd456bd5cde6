// AdamW over a flat buffer (math §7): θ ← θ − lr (m̂ / (√v̂ + eps) + wd θ).
#pragma once

#include <cstdint>

namespace k3::kernels {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  int64_t step = 1;        // 1-based step, for bias correction
  float grad_scale = 1.0f;  // multiplies grad first (clipping)
};

void adamw_step(const AdamWParams& p, float* param, const float* grad, float* m, float* v, int64_t n);

}  // namespace k3::kernels
