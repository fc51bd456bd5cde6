#include <algorithm>
#include <cmath>
#include <vector>

#include "k3/kernels/reference.h"

namespace k3::ref {

template <typename T>
double lm_head_cross_entropy(const T* h, const T* w, const int32_t* targets, int64_t N, int64_t d,
                             int64_t V, int32_t ignore_index, T grad_scale, T* dh, T* dw,
                             int64_t* count) {
  std::vector<T> logits(static_cast<size_t>(N * V));
  gemm<T>(false, true, N, V, d, T(1), h, d, w, d, T(0), logits.data(), V);
  double loss = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < N; ++i) {
    T* x = logits.data() + i * V;
    if (targets[i] == ignore_index) {
      std::fill(x, x + V, T(0));
      continue;
    }
    const T mx = *std::max_element(x, x + V);
    T sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - mx);
    const T lse = mx + std::log(sum);
    loss += static_cast<double>(lse - x[targets[i]]);
    ++counted;
    // dlogits = (softmax - onehot) * grad_scale
    for (int64_t j = 0; j < V; ++j) x[j] = std::exp(x[j] - lse) * grad_scale;
    x[targets[i]] -= grad_scale;
  }
  if (dh) gemm<T>(false, false, N, d, V, T(1), logits.data(), V, w, d, T(0), dh, d);
  if (dw) gemm<T>(true, false, V, d, N, T(1), logits.data(), V, h, d, T(1), dw, d);
  if (count) *count = counted;
  return loss;
}

template double lm_head_cross_entropy<float>(const float*, const float*, const int32_t*, int64_t,
                                             int64_t, int64_t, int32_t, float, float*, float*,
                                             int64_t*);
template double lm_head_cross_entropy<double>(const double*, const double*, const int32_t*, int64_t,
                                              int64_t, int64_t, int32_t, double, double*, double*,
                                              int64_t*);

}  // namespace k3::ref
