#include "k3/kernels/embedding.h"

#include <algorithm>
#include <cstring>

#include "k3/base/error.h"
#include "k3/kernels/column_split.h"

namespace k3::kernels {

// Validated up front: an exception must not escape an OpenMP region.
static VocabShard check(const int32_t* tokens, int64_t n, int64_t vocab, VocabShard shard) {
  for (int64_t i = 0; i < n; ++i)
    K3_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "embedding: token ", tokens[i], " at position ",
             i, " is outside the vocabulary [0, ", vocab, ")");
  if (shard.rows < 0) shard.rows = vocab;
  K3_CHECK(shard.first >= 0 && shard.first + shard.rows <= vocab, "embedding: shard [", shard.first,
           ", ", shard.first + shard.rows, ") outside the vocabulary of ", vocab);
  return shard;
}

static bool held(int32_t token, const VocabShard& s) {
  return token >= s.first && token < s.first + s.rows;
}

void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                       int64_t dim, float* out, VocabShard shard) {
  shard = check(tokens, n, vocab, shard);
#pragma omp parallel for schedule(static) if (n * dim > 65536)
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * dim;
    if (held(tokens[i], shard))
      std::memcpy(row, table + (tokens[i] - shard.first) * dim,
                  static_cast<size_t>(dim) * sizeof(float));
    else
      std::fill(row, row + dim, 0.f);
  }
}

void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t vocab,
                        int64_t dim, float* dtable, VocabShard shard) {
  shard = check(tokens, n, vocab, shard);
#pragma omp parallel if (n * dim > 65536)
  {
    const ColumnRange cols = thread_columns(dim);
    for (int64_t i = 0; i < n; ++i) {
      if (!held(tokens[i], shard)) continue;
      float* dst = dtable + (tokens[i] - shard.first) * dim;
      const float* src = dout + i * dim;
#pragma omp simd
      for (int64_t c = cols.begin; c < cols.end; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace k3::kernels
