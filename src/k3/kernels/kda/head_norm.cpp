#include "k3/kernels/kda/head_norm.h"

#include "k3/kernels/kda/rows.h"

namespace k3::kernels::kda {

void l2norm_forward(const float* x, float* y, float* rnorm, int64_t rows, int64_t dim,
                    float scale) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t r = 0; r < rows; ++r)
    rnorm[r] = rows::l2norm_row(x + r * dim, y + r * dim, dim, scale, kL2NormEps);
}

// With y = s r x and r = (Σx² + eps)^{−1/2}: dx = s r dy − s r³ x <dy, x> = s r dy − (r/s) y <dy,
// y>.
void l2norm_backward(const float* y, const float* rnorm, const float* dy, float* dx, int64_t rows,
                     int64_t dim, float scale) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float *yr = y + r * dim, *dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < dim; ++j) dot += dyr[j] * yr[j];
    const float a = scale * rnorm[r], b = rnorm[r] / scale * dot;
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) dxr[j] = a * dyr[j] - b * yr[j];
  }
}

}  // namespace k3::kernels::kda
