// RMSNorm over the last dimension: y = x * rstd (* w), rstd = 1/sqrt(mean(x²) + eps), in fp32.
// weight == nullptr means no weight. Forward saves rstd [rows] for backward.
#pragma once

#include <cstdint>

namespace k3::kernels {

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                     int64_t dim, float eps);
// dx is written; dweight (when weight != nullptr) is accumulated, reduced in a fixed order.
void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                      float* dx, float* dweight, int64_t rows, int64_t dim);

}  // namespace k3::kernels
