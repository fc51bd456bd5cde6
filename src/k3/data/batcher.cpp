#include "k3/data/batcher.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/data/random_draws.h"

namespace k3::data {

Batcher::Batcher(TokenView tokens, int64_t batch_size, int64_t seq_len,
                 uint64_t seed)
    : tokens_(std::move(tokens)), batch_size_(batch_size), seq_len_(seq_len), seed_(seed) {
  const int64_t n = tokens_.size();
  check_batch_shape(n, batch_size, seq_len, "training stream");
  // The largest offset that keeps the window count the same for every offset.
  max_offset_ = std::min(seq_len - 1, n - seq_len - 1);
  windows_per_epoch_ = (n - 1 - max_offset_) / seq_len;
}

void Batcher::prepare_epoch(int64_t epoch) {
  if (epoch == prepared_epoch_) return;
  static const uint64_t kDomain = stream_of("k3.data.batcher");
  RandomDraws draws(seed_ ^ kDomain, static_cast<uint64_t>(epoch));
  offset_ = static_cast<int64_t>(draws.below(static_cast<uint64_t>(max_offset_) + 1));
  order_.resize(windows_per_epoch_);
  std::iota(order_.begin(), order_.end(), int64_t{0});
  for (int64_t i = windows_per_epoch_ - 1; i > 0; --i)  // Fisher-Yates
    std::swap(order_[i], order_[draws.below(static_cast<uint64_t>(i) + 1)]);
  prepared_epoch_ = epoch;
}

void Batcher::next(Batch& out) { next(out, 0, batch_size_); }

void Batcher::next(Batch& out, int64_t first_row, int64_t rows) {
  K3_CHECK(first_row >= 0 && rows >= 0 && first_row + rows <= batch_size_, "rows ", first_row,
           "..", first_row + rows, " of a batch of ", batch_size_);
  out.resize(rows, seq_len_);
  for (int64_t r = 0; r < batch_size_; ++r) {
    prepare_epoch(cursor_.epoch);
    if (r >= first_row && r < first_row + rows)
      out.fill_row(r - first_row, tokens_, offset_ + order_[cursor_.position] * seq_len_);
    if (++cursor_.position == windows_per_epoch_) cursor_ = {cursor_.epoch + 1, 0};
  }
}

Batch Batcher::next() {
  Batch b;
  next(b);
  return b;
}

void Batcher::seek(const DataCursor& cursor) {
  K3_CHECK_CTX(cursor.epoch >= 0 && cursor.position >= 0 && cursor.position < windows_per_epoch_,
               (ErrorContext{"", "data cursor", -1}), "cursor ", cursor.to_string(),
               " is outside this data: expected a non-negative epoch and a position below ",
               windows_per_epoch_,
               " windows per epoch (was the dataset, seq_len or batch layout changed?)");
  cursor_ = cursor;
}

}  // namespace k3::data
