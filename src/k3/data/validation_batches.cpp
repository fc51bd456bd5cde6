#include "k3/data/validation_batches.h"

#include <algorithm>
#include <utility>

#include "k3/base/error.h"

namespace k3::data {

ValidationBatches::ValidationBatches(TokenView tokens, int64_t batch_size, int64_t seq_len)
    : tokens_(std::move(tokens)), batch_size_(batch_size), seq_len_(seq_len) {
  const int64_t n = tokens_.size();
  check_batch_shape(n, batch_size, seq_len, "validation stream");
  num_windows_ = (n - 1) / seq_len;
}

void ValidationBatches::batch(int64_t index, Batch& out) const {
  K3_CHECK(index >= 0 && index < num_batches(), "validation batch ", index, " out of range [0, ",
           num_batches(), ")");
  const int64_t first = index * batch_size_;
  out.resize(std::min(batch_size_, num_windows_ - first), seq_len_);
  for (int64_t r = 0; r < out.rows; ++r) out.fill_row(r, tokens_, (first + r) * seq_len_);
}

Batch ValidationBatches::batch(int64_t index) const {
  Batch b;
  batch(index, b);
  return b;
}

}  // namespace k3::data
