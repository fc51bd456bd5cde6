#include <cmath>

#include "k3/kernels/kda/head_norm.h"
#include "k3/kernels/kda/reference.h"

namespace k3::ref::kda {

template <typename T>
void l2norm_forward(const T* x, T* y, T* rnorm, int64_t rows, int64_t dim, T scale) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += x[r * dim + j] * x[r * dim + j];
    rnorm[r] = T(1) / std::sqrt(ss + T(kernels::kda::kL2NormEps));
    for (int64_t j = 0; j < dim; ++j) y[r * dim + j] = scale * x[r * dim + j] * rnorm[r];
  }
}

// x = y / (scale · rnorm); dx_k = scale (rnorm dy_k − rnorm³ x_k <dy, x>).
template <typename T>
void l2norm_backward(const T* y, const T* rnorm, const T* dy, T* dx, int64_t rows, int64_t dim,
                     T scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const T n = rnorm[r];
    T dot = 0;
    for (int64_t j = 0; j < dim; ++j) dot += dy[r * dim + j] * y[r * dim + j] / (scale * n);
    for (int64_t j = 0; j < dim; ++j) {
      const T x = y[r * dim + j] / (scale * n);
      dx[r * dim + j] = scale * (n * dy[r * dim + j] - n * n * n * x * dot);
    }
  }
}

template void l2norm_forward<float>(const float*, float*, float*, int64_t, int64_t, float);
template void l2norm_forward<double>(const double*, double*, double*, int64_t, int64_t, double);
template void l2norm_backward<float>(const float*, const float*, const float*, float*, int64_t,
                                     int64_t, float);
template void l2norm_backward<double>(const double*, const double*, const double*, double*, int64_t,
                                      int64_t, double);

}  // namespace k3::ref::kda
