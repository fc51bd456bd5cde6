#include <cmath>

#include "k3/kernels/reference.h"

namespace k3::ref {

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, int64_t rows, int64_t dim, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += x[r * dim + j] * x[r * dim + j];
    rstd[r] = T(1) / std::sqrt(ss / T(dim) + eps);
    for (int64_t j = 0; j < dim; ++j)
      y[r * dim + j] = x[r * dim + j] * rstd[r] * (weight ? weight[j] : T(1));
  }
}

// y_j = x_j s w_j with s = (mean(x²) + eps)^(-1/2), ds/dx_k = -s³ x_k / dim.
template <typename T>
void rmsnorm_backward(const T* x, const T* weight, const T* rstd, const T* dy, T* dx, T* dweight,
                      int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const T s = rstd[r];
    T dot = 0;  // sum_j dy_j w_j x_j
    for (int64_t j = 0; j < dim; ++j)
      dot += dy[r * dim + j] * (weight ? weight[j] : T(1)) * x[r * dim + j];
    for (int64_t j = 0; j < dim; ++j)
      dx[r * dim + j] = s * dy[r * dim + j] * (weight ? weight[j] : T(1)) -
                        s * s * s * x[r * dim + j] * dot / T(dim);
    if (weight && dweight)
      for (int64_t j = 0; j < dim; ++j) dweight[j] += dy[r * dim + j] * x[r * dim + j] * s;
  }
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, int64_t, int64_t,
                                     float);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*, int64_t,
                                      int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, int64_t, int64_t);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*,
                                       double*, double*, int64_t, int64_t);

}  // namespace k3::ref
