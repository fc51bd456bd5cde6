// Global gradient norm and clipping.
#pragma once

#include <cstddef>

namespace k3 {

// sqrt(sum of squares) over a flat gradient buffer, accumulated in double in a fixed order
// (blocks of fixed size, summed in block order): the same on any thread count.
double global_grad_norm(const float* grads, size_t n);

// The factor that brings the norm down to max_norm (1 when already below, or max_norm <= 0).
float clip_factor(double norm, double max_norm);

}  // namespace k3
