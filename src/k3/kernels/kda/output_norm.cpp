#include "k3/kernels/kda/output_norm.h"

#include "k3/kernels/column_split.h"
#include "k3/kernels/kda/rows.h"

namespace k3::kernels::kda {

void gated_rmsnorm_forward(const float* o, const float* w, const float* gate, float* y, float* rstd,
                           int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t r = 0; r < rows; ++r)
    rstd[r] = rows::gated_rmsnorm_row(o + r * dim, w, gate + r * dim, y + r * dim, dim, eps);
}

// With n = o ⊙ w · rstd and s = sigmoid(gate), y = n ⊙ s:
//   dgate = dy ⊙ n ⊙ s(1 − s);  z = dy ⊙ s ⊙ w;  do = rstd · (z − o · rstd² · <z, o> / dim);
//   dw += Σ_rows dy ⊙ s ⊙ o · rstd.
void gated_rmsnorm_backward(const float* o, const float* w, const float* gate, const float* rstd,
                            const float* dy, float* do_, float* dw, float* dgate, int64_t rows,
                            int64_t dim) {
  const bool parallel = rows * dim > 32768;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const float *orow = o + r * dim, *grow = gate + r * dim, *dyr = dy + r * dim;
    float *dor = do_ + r * dim, *dgr = dgate + r * dim;
    const float s = rstd[r];
    float zo = 0;
#pragma omp simd reduction(+ : zo)
    for (int64_t j = 0; j < dim; ++j) {
      const fast::SigmoidPair sg = fast::sigmoid_pair(grow[j]);
      dgr[j] = dyr[j] * orow[j] * s * w[j] * sg.s * sg.c;
      dor[j] = dyr[j] * sg.s * w[j];  // z, finished below
      zo += dor[j] * orow[j];
    }
    const float c = s * s * zo / static_cast<float>(dim);
#pragma omp simd
    for (int64_t j = 0; j < dim; ++j) dor[j] = s * (dor[j] - orow[j] * c);
  }
#pragma omp parallel if (parallel)
  {
    const ColumnRange cols = thread_columns(dim);
    for (int64_t r = 0; r < rows; ++r) {
      const float *orow = o + r * dim, *grow = gate + r * dim, *dyr = dy + r * dim;
#pragma omp simd
      for (int64_t j = cols.begin; j < cols.end; ++j)
        dw[j] += dyr[j] * fast::sigmoid(grow[j]) * orow[j] * rstd[r];
    }
  }
}

}  // namespace k3::kernels::kda
