#include <cmath>

#include "k3/kernels/reference.h"

namespace k3::ref {

// Each element from the definition: y_i = x_i cos − x_{i+d/2} sin, y_{i+d/2} = x_{i+d/2} cos +
// x_i sin.
template <typename T>
void rope_forward(const kernels::RopeLayout& l, const double* freqs, const int64_t* positions,
                  T* x) {
  const int64_t half = l.d / 2;
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        T* v = x + r * l.ld_row + h * l.ld_head;
        const double angle = static_cast<double>(positions[r]) * freqs[i];
        const T c = static_cast<T>(std::cos(angle)), s = static_cast<T>(std::sin(angle));
        const T a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
}

// The transposed Jacobian of the above: dx_i = dy_i cos + dy_{i+d/2} sin,
// dx_{i+d/2} = −dy_i sin + dy_{i+d/2} cos.
template <typename T>
void rope_backward(const kernels::RopeLayout& l, const double* freqs, const int64_t* positions,
                   T* dy) {
  const int64_t half = l.d / 2;
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        T* g = dy + r * l.ld_row + h * l.ld_head;
        const double angle = static_cast<double>(positions[r]) * freqs[i];
        const T c = static_cast<T>(std::cos(angle)), s = static_cast<T>(std::sin(angle));
        const T a = g[i], b = g[i + half];
        g[i] = a * c + b * s;
        g[i + half] = b * c - a * s;
      }
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
