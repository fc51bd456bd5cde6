#include "k3/kernels/reference.h"

namespace k3::ref {

template <typename T>
void embedding_forward(const int32_t* tokens, int64_t n, const T* table, int64_t dim, T* out) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) out[i * dim + j] = table[tokens[i] * dim + j];
}

template <typename T>
void embedding_backward(const int32_t* tokens, int64_t n, const T* dout, int64_t dim, T* dtable) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) dtable[tokens[i] * dim + j] += dout[i * dim + j];
}

template void embedding_forward<float>(const int32_t*, int64_t, const float*, int64_t, float*);
template void embedding_forward<double>(const int32_t*, int64_t, const double*, int64_t, double*);
template void embedding_backward<float>(const int32_t*, int64_t, const float*, int64_t, float*);
template void embedding_backward<double>(const int32_t*, int64_t, const double*, int64_t, double*);

}  // namespace k3::ref
