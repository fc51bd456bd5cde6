// Per-head L2 normalization of KDA's queries and keys (math §3, step 5), over rows of dim
// channels: y = scale · x / sqrt(Σx² + 1e-6) (scale D^{−1/2} for q, 1 for k).
#pragma once

#include <cstdint>

namespace k3::kernels::kda {

inline constexpr float kL2NormEps = 1e-6f;

// rnorm [rows] = 1/sqrt(Σx² + eps) is saved for backward.
void l2norm_forward(const float* x, float* y, float* rnorm, int64_t rows, int64_t dim, float scale);
// Needs the forward output y (not x) and scale > 0; dx is written.
void l2norm_backward(const float* y, const float* rnorm, const float* dy, float* dx, int64_t rows,
                     int64_t dim, float scale);

}  // namespace k3::kernels::kda
