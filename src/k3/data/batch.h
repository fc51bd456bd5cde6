// A batch of training sequences: row r is the window tokens[starts[r] .. starts[r] + seq_len + 1),
// its first seq_len tokens the inputs and its last seq_len tokens the targets.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "k3/data/token_view.h"

namespace k3::data {

struct Batch {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;   // rows x seq_len, row-major
  std::vector<int32_t> targets;  // rows x seq_len, row-major
  std::vector<int64_t> starts;   // per row, where its window begins in the token stream

  // Sizes the batch for `rows` rows, reusing its memory.
  void resize(int64_t rows, int64_t seq_len);
  // Fills row r from the window starting at `start` (which must fit in tokens).
  void fill_row(int64_t r, const TokenView& tokens, int64_t start);
};

// The starts of the documents packed in the batch's inputs, over its rows laid end to end: every
// row's first position, and each position that follows an `end_token` (kernels/kda/sequences.h's
// doc_starts of one row of rows x seq_len tokens).
std::vector<int64_t> document_starts(const Batch& b, int32_t end_token);

// Throws a k3::Error (field "batch_size" or "seq_len") unless batch_size >= 1, seq_len >= 1 and a
// window of seq_len + 1 tokens fits in the stream; `stream` names it in the message.
void check_batch_shape(int64_t num_tokens, int64_t batch_size, int64_t seq_len,
                       std::string_view stream);

}  // namespace k3::data
