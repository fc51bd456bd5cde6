#include "k3/data/batch.h"

#include <algorithm>
#include <string>

#include "k3/base/error.h"

namespace k3::data {

void Batch::resize(int64_t new_rows, int64_t new_seq_len) {
  rows = new_rows;
  seq_len = new_seq_len;
  inputs.resize(rows * seq_len);
  targets.resize(rows * seq_len);
  starts.resize(rows);
}

std::vector<int64_t> document_starts(const Batch& b, int32_t end_token) {
  std::vector<int64_t> starts;
  for (int64_t r = 0; r < b.rows; ++r)
    for (int64_t t = 0; t < b.seq_len; ++t)
      if (t == 0 || b.inputs[static_cast<size_t>(r * b.seq_len + t - 1)] == end_token)
        starts.push_back(r * b.seq_len + t);
  return starts;
}

void Batch::fill_row(int64_t r, const TokenView& tokens, int64_t start) {
  tokens.copy(start, seq_len, inputs.data() + r * seq_len);
  tokens.copy(start + 1, seq_len, targets.data() + r * seq_len);
  starts[r] = start;
}

void check_batch_shape(int64_t num_tokens, int64_t batch_size, int64_t seq_len,
                       std::string_view stream) {
  K3_CHECK_CTX(batch_size >= 1, (ErrorContext{"", "batch_size", -1}),
               "expected a batch size >= 1, got ", batch_size);
  K3_CHECK_CTX(seq_len >= 1 && num_tokens >= seq_len + 1, (ErrorContext{"", "seq_len", -1}),
               "a window of seq_len + 1 = ", seq_len + 1, " tokens does not fit in the ", stream,
               " of ", num_tokens, " tokens");
}

}  // namespace k3::data
