#include <cmath>

#include "k3/kernels/reference.h"

namespace k3::ref {

namespace {

// Each pair (i, i + d/2) of every head turned by SIGN times its angle: y_i = x_i cos − x_{i+d/2}
// sin, y_{i+d/2} = x_{i+d/2} cos + x_i sin for the forward (+1). A rotation's transposed Jacobian
// is the rotation back, so the backward is the same turn by −1.
template <typename T>
void rotate(const kernels::RopeLayout& l, const double* freqs, const int64_t* positions, T* x,
            double sign) {
  const int64_t half = l.d / 2;
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        T* v = x + r * l.ld_row + h * l.ld_head;
        const double angle = sign * static_cast<double>(positions[r]) * freqs[i];
        const T c = static_cast<T>(std::cos(angle)), s = static_cast<T>(std::sin(angle));
        const T a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
}

}  // namespace

template <typename T>
void rope_forward(const kernels::RopeLayout& l, const double* freqs, const int64_t* positions,
                  T* x) {
  rotate(l, freqs, positions, x, 1.0);
}

template <typename T>
void rope_backward(const kernels::RopeLayout& l, const double* freqs, const int64_t* positions,
                   T* dy) {
  rotate(l, freqs, positions, dy, -1.0);
}

template void rope_forward<float>(const kernels::RopeLayout&, const double*, const int64_t*,
                                  float*);
template void rope_forward<double>(const kernels::RopeLayout&, const double*, const int64_t*,
                                   double*);
template void rope_backward<float>(const kernels::RopeLayout&, const double*, const int64_t*,
                                   float*);
template void rope_backward<double>(const kernels::RopeLayout&, const double*, const int64_t*,
                                    double*);

}  // namespace k3::ref
