// Token embedding: out[i, :] = table[tokens[i], :]; backward scatter-adds rows into dtable.
// The backward is deterministic: each thread owns a range of columns and walks tokens in order.
//
// The table may hold only a shard of the vocabulary, rows [first, first + rows) (the
// vocabulary-parallel embedding): a token outside the shard reads zeros and gives it no gradient,
// so the shards' outputs summed over the ranks are the whole table's.
#pragma once

#include <cstdint>

namespace k3::kernels {

struct VocabShard {
  int64_t first = 0, rows = -1;  // rows = -1: the whole vocabulary
};

// Every token must lie in [0, vocab).
void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                       int64_t dim, float* out, VocabShard shard = {});
// dtable[tokens[i] - first, :] += dout[i, :] for the tokens in the shard (accumulates).
void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t vocab,
                        int64_t dim, float* dtable, VocabShard shard = {});

}  // namespace k3::kernels
