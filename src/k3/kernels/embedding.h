// Token embedding: out[i, :] = table[tokens[i], :]; backward scatter-adds rows into dtable.
// The backward is deterministic: each thread owns a range of columns and walks tokens in order.
#pragma once

#include <cstdint>

namespace k3::kernels {

void embedding_forward(const int32_t* tokens, int64_t n, const float* table, int64_t vocab,
                       int64_t dim, float* out);
// dtable[tokens[i], :] += dout[i, :] (accumulates).
void embedding_backward(const int32_t* tokens, int64_t n, const float* dout, int64_t vocab,
                        int64_t dim, float* dtable);

}  // namespace k3::kernels
