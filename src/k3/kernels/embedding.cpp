#include "k3/kernels/embedding.h"

#include <cstring>

#include "k3/base/error.h"
#include "k3/kernels/column_split.h"

namespace k3::kernels {

// Validated up front: an exception must not escape an OpenMP region.
static void check_tokens(const int32_t* tokens, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    K3_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "embedding: token ", tokens[i], " at position ",
             i, " is outside the vocabulary [0, ", vocab, ")");
}

void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                       int64_t dim, float* out) {
  check_tokens(tokens, n, vocab);
#pragma omp parallel for schedule(static) if (n * dim > 65536)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(out + i * dim, table + tokens[i] * dim, static_cast<size_t>(dim) * sizeof(float));
}

void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t vocab,
                        int64_t dim, float* dtable) {
  check_tokens(tokens, n, vocab);
#pragma omp parallel if (n * dim > 65536)
  {
    const ColumnRange cols = thread_columns(dim);
    for (int64_t i = 0; i < n; ++i) {
      float* dst = dtable + tokens[i] * dim;
      const float* src = dout + i * dim;
#pragma omp simd
      for (int64_t c = cols.begin; c < cols.end; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace k3::kernels
