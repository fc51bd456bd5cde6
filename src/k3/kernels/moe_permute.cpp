#include "k3/kernels/moe_permute.h"

#include <algorithm>
#include <vector>

#include "k3/base/error.h"

namespace k3::kernels {

// Below this many elements a parallel region costs more than it saves.
static constexpr int64_t kParallelMin = 1 << 15;

void moe_permute_plan(const int32_t* ids, MoePermutePlan& plan) {
  const int64_t pairs = plan.tokens * plan.k;
  std::fill(plan.offsets, plan.offsets + plan.experts + 1, 0);
  for (int64_t p = 0; p < pairs; ++p) {
    K3_CHECK(ids[p] >= 0 && ids[p] < plan.experts, "moe_permute_plan: expert id ", ids[p],
             " of pair ", p, " is outside [0, ", plan.experts, ")");
    ++plan.offsets[ids[p] + 1];
  }
  for (int64_t e = 0; e < plan.experts; ++e) plan.offsets[e + 1] += plan.offsets[e];
  std::vector<int64_t> next(plan.offsets, plan.offsets + plan.experts);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t r = next[static_cast<size_t>(ids[p])]++;
    plan.pair_of_row[r] = p;
    plan.row_of_pair[p] = r;
  }
}

void moe_permute(const MoePermutePlan& plan, const float* x, int64_t dim, float* rows) {
  const int64_t n = plan.tokens * plan.k;
#pragma omp parallel for schedule(static) if (n * dim > kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const float* src = x + plan.pair_of_row[r] / plan.k * dim;
    std::copy(src, src + dim, rows + r * dim);
  }
}

void moe_permute_backward(const MoePermutePlan& plan, const float* drows, int64_t dim, float* dx) {
#pragma omp parallel for schedule(static) if (plan.tokens * plan.k * dim > kParallelMin)
  for (int64_t t = 0; t < plan.tokens; ++t) {
    float* d = dx + t * dim;
    std::fill(d, d + dim, 0.f);
    for (int64_t j = 0; j < plan.k; ++j) {
      const float* src = drows + plan.row_of_pair[t * plan.k + j] * dim;
#pragma omp simd
      for (int64_t c = 0; c < dim; ++c) d[c] += src[c];
    }
  }
}

void moe_unpermute(const MoePermutePlan& plan, const float* rows, const float* weights, int64_t dim,
                   float* out) {
#pragma omp parallel for schedule(static) if (plan.tokens * plan.k * dim > kParallelMin)
  for (int64_t t = 0; t < plan.tokens; ++t) {
    float* o = out + t * dim;
    std::fill(o, o + dim, 0.f);
    for (int64_t j = 0; j < plan.k; ++j) {
      const int64_t p = t * plan.k + j;
      const float w = weights[p], *src = rows + plan.row_of_pair[p] * dim;
#pragma omp simd
      for (int64_t c = 0; c < dim; ++c) o[c] += w * src[c];
    }
  }
}

void moe_unpermute_backward(const MoePermutePlan& plan, const float* rows, const float* weights,
                            const float* dout, int64_t dim, float* drows, float* dweights) {
#pragma omp parallel for schedule(static) if (plan.tokens * plan.k * dim > kParallelMin)
  for (int64_t t = 0; t < plan.tokens; ++t) {
    const float* d = dout + t * dim;
    for (int64_t j = 0; j < plan.k; ++j) {
      const int64_t p = t * plan.k + j, r = plan.row_of_pair[p];
      const float w = weights[p], *y = rows + r * dim;
      float* dy = drows + r * dim;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < dim; ++c) {
        dy[c] = w * d[c];
        dot += d[c] * y[c];
      }
      dweights[p] = dot;
    }
  }
}

}  // namespace k3::kernels
