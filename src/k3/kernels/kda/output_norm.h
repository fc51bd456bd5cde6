// KDA's gated output norm (math §3, step 7), per head over rows of dim channels:
//   y = o / sqrt(mean(o²) + eps) ⊙ w ⊙ sigmoid(gate)
// with one weight w [dim] shared by all heads. o, gate, y: [rows, dim].
#pragma once

#include <cstdint>

namespace k3::kernels::kda {

// rstd [rows] = 1/sqrt(mean(o²) + eps) is saved for backward.
void gated_rmsnorm_forward(const float* o, const float* w, const float* gate, float* y, float* rstd,
                           int64_t rows, int64_t dim, float eps);
// do_ and dgate are written; dw is accumulated, reduced in an order that does not depend on the
// thread count.
void gated_rmsnorm_backward(const float* o, const float* w, const float* gate, const float* rstd,
                            const float* dy, float* do_, float* dw, float* dgate, int64_t rows,
                            int64_t dim);

}  // namespace k3::kernels::kda
