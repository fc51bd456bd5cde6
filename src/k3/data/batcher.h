// Deterministic training batches from a token stream.
//
// The stream is cut into windows of seq_len + 1 tokens at stride seq_len (consecutive windows share
// one token, so every target is predicted once), starting at an offset drawn per epoch from
// [0, seq_len) (less when the stream is barely longer than a window); each epoch serves its windows
// in a Philox-shuffled order. The number of windows is the same in every epoch. Offset and
// order depend only on (seed, epoch), so the sequence of batches depends only on (tokens, batch
// size, seq_len, seed) and never on thread count. Batches run on across epoch ends; a DataCursor
// marks the position and seek() returns to it.
#pragma once

#include <cstdint>
#include <vector>

#include "k3/data/batch.h"
#include "k3/data/data_cursor.h"
#include "k3/data/token_view.h"

namespace k3::data {

class Batcher {
 public:
  // `tokens` must outlive the batcher. Throws a k3::Error (field "seq_len") when the stream is
  // shorter than one window, or (field "batch_size") for a batch size below 1.
  Batcher(TokenView tokens, int64_t batch_size, int64_t seq_len, uint64_t seed);

  void next(Batch& out);  // fills batch_size rows, reusing out's memory
  // The rows [first_row, first_row + rows) of the next batch only (a data-parallel rank's
  // share); the cursor moves past the whole batch, as next() does.
  void next(Batch& out, int64_t first_row, int64_t rows);
  Batch next();

  const DataCursor& cursor() const { return cursor_; }  // where the next batch begins
  // Throws a k3::Error (field "data cursor") when the position is not below windows_per_epoch().
  void seek(const DataCursor& cursor);

  int64_t windows_per_epoch() const { return windows_per_epoch_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t seq_len() const { return seq_len_; }

 private:
  void prepare_epoch(int64_t epoch);

  TokenView tokens_;
  int64_t batch_size_;
  int64_t seq_len_;
  uint64_t seed_;
  int64_t max_offset_;
  int64_t windows_per_epoch_;
  DataCursor cursor_;
  int64_t prepared_epoch_ = -1;
  int64_t offset_ = 0;          // of prepared_epoch_
  std::vector<int64_t> order_;  // of prepared_epoch_: window indices in serving order
};

}  // namespace k3::data
