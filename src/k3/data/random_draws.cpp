#include "k3/data/random_draws.h"

#include "k3/base/error.h"

namespace k3::data {

uint32_t RandomDraws::next_u32() {
  if (word_ == 4) {
    block_ =
        philox4x32({static_cast<uint32_t>(block_index_), static_cast<uint32_t>(block_index_ >> 32),
                    static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                   key_);
    ++block_index_;
    word_ = 0;
  }
  return block_[word_++];
}

uint64_t RandomDraws::below(uint64_t n) {
  K3_CHECK(n >= 1, "RandomDraws::below needs n >= 1");
  if (n <= (uint64_t{1} << 32)) {
    // Accept x < 2^32 - (2^32 mod n): the accepted range is a whole number of copies of [0, n).
    const uint64_t accept_below = (uint64_t{1} << 32) - (uint64_t{1} << 32) % n;
    for (;;) {
      uint64_t x = next_u32();
      if (x < accept_below) return x % n;
    }
  }
  const uint64_t excess = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    uint64_t x = (uint64_t{next_u32()} << 32) | next_u32();
    if (x <= ~uint64_t{0} - excess) return x % n;
  }
}

}  // namespace k3::data
