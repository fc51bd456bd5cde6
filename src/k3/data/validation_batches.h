// The validation split in fixed order: windows of seq_len + 1 tokens at stride seq_len from the
// start of the stream, batch_size per batch; the last batch holds what is left (rows may be fewer).
#pragma once

#include <cstdint>

#include "k3/data/batch.h"
#include "k3/data/token_view.h"

namespace k3::data {

class ValidationBatches {
 public:
  // `tokens` must outlive this object. Throws a k3::Error (field "seq_len") when the stream is
  // shorter than one window, or (field "batch_size") for a batch size below 1.
  ValidationBatches(TokenView tokens, int64_t batch_size, int64_t seq_len);

  int64_t num_windows() const { return num_windows_; }
  int64_t num_batches() const { return (num_windows_ + batch_size_ - 1) / batch_size_; }
  void batch(int64_t index, Batch& out) const;  // index in [0, num_batches())
  Batch batch(int64_t index) const;

 private:
  TokenView tokens_;
  int64_t batch_size_;
  int64_t seq_len_;
  int64_t num_windows_;
};

}  // namespace k3::data
