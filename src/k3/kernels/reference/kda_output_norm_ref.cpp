#include <cmath>

#include "k3/kernels/kda/reference.h"

namespace k3::ref::kda {

template <typename T>
void gated_rmsnorm_forward(const T* o, const T* w, const T* gate, T* y, T* rstd, int64_t rows,
                           int64_t dim, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += o[r * dim + j] * o[r * dim + j];
    rstd[r] = T(1) / std::sqrt(ss / T(dim) + eps);
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t i = r * dim + j;
      y[i] = o[i] * rstd[r] * w[j] / (T(1) + std::exp(-gate[i]));
    }
  }
}

// y_j = o_j s w_j σ_j with s = (mean(o²) + eps)^{−1/2}, ∂s/∂o_k = −s³ o_k / dim.
template <typename T>
void gated_rmsnorm_backward(const T* o, const T* w, const T* gate, const T* rstd, const T* dy,
                            T* do_, T* dw, T* dgate, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const T s = rstd[r];
    T dot = 0;  // Σ_j dy_j w_j σ_j o_j
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t i = r * dim + j;
      const T sg = T(1) / (T(1) + std::exp(-gate[i]));
      dot += dy[i] * w[j] * sg * o[i];
      dgate[i] = dy[i] * o[i] * s * w[j] * sg * (T(1) - sg);
      dw[j] += dy[i] * o[i] * s * sg;
    }
    for (int64_t j = 0; j < dim; ++j) {
      const int64_t i = r * dim + j;
      const T sg = T(1) / (T(1) + std::exp(-gate[i]));
      do_[i] = s * dy[i] * w[j] * sg - s * s * s * o[i] * dot / T(dim);
    }
  }
}

template void gated_rmsnorm_forward<float>(const float*, const float*, const float*, float*, float*,
                                           int64_t, int64_t, float);
template void gated_rmsnorm_forward<double>(const double*, const double*, const double*, double*,
                                            double*, int64_t, int64_t, double);
template void gated_rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                            const float*, float*, float*, float*, int64_t, int64_t);
template void gated_rmsnorm_backward<double>(const double*, const double*, const double*,
                                             const double*, const double*, double*, double*,
                                             double*, int64_t, int64_t);

}  // namespace k3::ref::kda
