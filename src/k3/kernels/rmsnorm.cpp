#include "k3/kernels/rmsnorm.h"

#include <cmath>

#include "k3/kernels/column_split.h"

namespace k3::kernels {

// Row kernels templated on whether there is a weight, so the unweighted case costs nothing.
template <bool kWeighted>
static float forward_row(const float* x, const float* w, float* y, int64_t dim, float eps) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t j = 0; j < dim; ++j) ss += x[j] * x[j];
  const float s = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) y[j] = x[j] * s * (kWeighted ? w[j] : 1.0f);
  return s;
}

// With z = dy (* w): dx = rstd * (z - x * rstd² * <z, x> / dim).
template <bool kWeighted>
static void backward_row(const float* x, const float* w, float s, const float* dy, float* dx,
                         int64_t dim) {
  float zx = 0;
#pragma omp simd reduction(+ : zx)
  for (int64_t j = 0; j < dim; ++j) zx += dy[j] * (kWeighted ? w[j] : 1.0f) * x[j];
  const float c = s * s * zx / static_cast<float>(dim);
#pragma omp simd
  for (int64_t j = 0; j < dim; ++j) dx[j] = s * (dy[j] * (kWeighted ? w[j] : 1.0f) - x[j] * c);
}

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                     int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t r = 0; r < rows; ++r)
    rstd[r] = weight ? forward_row<true>(x + r * dim, weight, y + r * dim, dim, eps)
                     : forward_row<false>(x + r * dim, weight, y + r * dim, dim, eps);
}

void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                      float* dx, float* dweight, int64_t rows, int64_t dim) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    if (weight)
      backward_row<true>(x + r * dim, weight, rstd[r], dy + r * dim, dx + r * dim, dim);
    else
      backward_row<false>(x + r * dim, weight, rstd[r], dy + r * dim, dx + r * dim, dim);
  }
  if (!weight || !dweight) return;
    // dweight[j] += sum_r dy[r, j] x[r, j] rstd[r], in a fixed order (see column_split.h).
#pragma omp parallel if (rows * dim > 32768)
  {
    const ColumnRange cols = thread_columns(dim);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      const float* dyr = dy + r * dim;
      const float s = rstd[r];
#pragma omp simd
      for (int64_t j = cols.begin; j < cols.end; ++j) dweight[j] += dyr[j] * xr[j] * s;
    }
  }
}

}  // namespace k3::kernels
