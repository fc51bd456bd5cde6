// A sequence of random draws from one Philox stream: draw k of stream s under key K is word k%4 of
// the Philox block with counter (k/4, s). Whoever knows (K, s) can replay the sequence anywhere.
#pragma once

#include <cstdint>

#include "k3/base/philox.h"

namespace k3::data {

class RandomDraws {
 public:
  RandomDraws(uint64_t key, uint64_t stream) : key_(key), stream_(stream) {}

  uint32_t next_u32();
  // Exactly uniform on [0, n) for n >= 1 (rejection sampling, no modulo bias).
  uint64_t below(uint64_t n);

 private:
  uint64_t key_;
  uint64_t stream_;
  uint64_t block_index_ = 0;
  int word_ = 4;  // the next word of block_ to hand out; 4 means "fetch the next block"
  Philox4 block_{};
};

}  // namespace k3::data
