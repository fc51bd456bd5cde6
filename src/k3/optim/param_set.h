// What an optimizer sees of the model: named ranges of one flat value buffer and one flat gradient
// buffer with the same layout. (The model's parameter registry provides it; the optimizer layer
// does not depend on the model.) Under tensor parallelism a slot is this rank's shard of a global
// tensor: the shards of all ranks, concatenated along split_dim in rank order, are the tensor.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3::optim {

struct ParamSlot {
  std::string name;
  Shape shape;              // this rank's shard (the whole tensor when unsplit)
  size_t offset = 0;        // floats, into the flat buffers
  Shape global_shape = {};  // the whole tensor's; read only when split (unsplit: `shape`)
  int split_dim = -1;       // the dimension split over ranks; -1: unsplit
  int64_t split_start = 0;  // where this shard begins along split_dim
  int64_t numel() const { return shape_numel(shape); }
  const Shape& global() const { return split_dim < 0 ? shape : global_shape; }

  // Calls f(global, local, n) for each run of local elements [begin, end) (flat indices into
  // the shard) that lie consecutively in the global tensor: the flat indices of the run's first
  // element there and here, and its length.
  template <typename F>
  void for_each_global_run(int64_t begin, int64_t end, F f) const {
    if (split_dim < 0) {
      if (begin < end) f(begin, begin, end - begin);
      return;
    }
    // The shard is one run per index of the dimensions before the split one.
    const auto d = static_cast<size_t>(split_dim);
    int64_t inner = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
    const int64_t run = shape[d] * inner, global_run = global_shape[d] * inner;
    for (int64_t at = begin; at < end;) {
      const int64_t outer = at / run, stop = std::min(end, (outer + 1) * run);
      f(outer * global_run + split_start * inner + at - outer * run, at, stop - at);
      at = stop;
    }
  }
};

struct ParamSet {
  std::vector<ParamSlot> slots;
  float* values = nullptr;
  float* grads = nullptr;
  size_t flat_size = 0;  // floats
};

// One optimizer state per parameter (a moment, a momentum), each slot's packed after the previous
// one's in one zeroed buffer.
class PackedState {
 public:
  explicit PackedState(const std::vector<ParamSlot>& slots) {
    size_t total = 0;
    for (const ParamSlot& p : slots) {
      offsets_.push_back(total);
      total += static_cast<size_t>(p.numel());
    }
    data_ = Tensor::zeros({static_cast<int64_t>(total)});
  }
  float* at(size_t i) const { return data_.f32() + offsets_[i]; }
  // Slot i's state with its parameter's shape (for checkpoints).
  Tensor view(size_t i, const ParamSlot& p) const { return Tensor::view(at(i), p.shape); }

 private:
  Tensor data_;
  std::vector<size_t> offsets_;
};

}  // namespace k3::optim
