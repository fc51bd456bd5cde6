#include "k3/kernels/moe_reference.h"

namespace k3::ref {

void moe_permute_plan(const int32_t* ids, kernels::MoePermutePlan& plan) {
  const int64_t pairs = plan.tokens * plan.k;
  int64_t row = 0;
  for (int64_t e = 0; e < plan.experts; ++e) {
    plan.offsets[e] = row;
    for (int64_t p = 0; p < pairs; ++p)
      if (ids[p] == e) plan.pair_of_row[row++] = p;
  }
  plan.offsets[plan.experts] = row;
  for (int64_t r = 0; r < row; ++r) plan.row_of_pair[plan.pair_of_row[r]] = r;
}

template <typename T>
void moe_permute(const kernels::MoePermutePlan& plan, const T* x, int64_t dim, T* rows) {
  for (int64_t r = 0; r < plan.tokens * plan.k; ++r)
    for (int64_t c = 0; c < dim; ++c) rows[r * dim + c] = x[plan.pair_of_row[r] / plan.k * dim + c];
}

template <typename T>
void moe_permute_backward(const kernels::MoePermutePlan& plan, const T* drows, int64_t dim, T* dx) {
  for (int64_t i = 0; i < plan.tokens * dim; ++i) dx[i] = 0;
  for (int64_t r = 0; r < plan.tokens * plan.k; ++r)
    for (int64_t c = 0; c < dim; ++c)
      dx[plan.pair_of_row[r] / plan.k * dim + c] += drows[r * dim + c];
}

template <typename T>
void moe_unpermute(const kernels::MoePermutePlan& plan, const T* rows, const T* weights,
                   int64_t dim, T* out) {
  for (int64_t i = 0; i < plan.tokens * dim; ++i) out[i] = 0;
  for (int64_t r = 0; r < plan.tokens * plan.k; ++r) {
    const int64_t p = plan.pair_of_row[r];
    for (int64_t c = 0; c < dim; ++c) out[p / plan.k * dim + c] += weights[p] * rows[r * dim + c];
  }
}

template <typename T>
void moe_unpermute_backward(const kernels::MoePermutePlan& plan, const T* rows, const T* weights,
                            const T* dout, int64_t dim, T* drows, T* dweights) {
  for (int64_t r = 0; r < plan.tokens * plan.k; ++r) {
    const int64_t p = plan.pair_of_row[r], t = p / plan.k;
    dweights[p] = 0;
    for (int64_t c = 0; c < dim; ++c) {
      drows[r * dim + c] = weights[p] * dout[t * dim + c];
      dweights[p] += dout[t * dim + c] * rows[r * dim + c];
    }
  }
}

#define K3_INSTANTIATE(T)                                                                          \
  template void moe_permute<T>(const kernels::MoePermutePlan&, const T*, int64_t, T*);             \
  template void moe_permute_backward<T>(const kernels::MoePermutePlan&, const T*, int64_t, T*);    \
  template void moe_unpermute<T>(const kernels::MoePermutePlan&, const T*, const T*, int64_t, T*); \
  template void moe_unpermute_backward<T>(const kernels::MoePermutePlan&, const T*, const T*,      \
                                          const T*, int64_t, T*, T*);
K3_INSTANTIATE(float)
K3_INSTANTIATE(double)
#undef K3_INSTANTIATE

}  // namespace k3::ref
