// What an optimizer sees of the model: named ranges of one flat value buffer and one flat gradient
// buffer with the same layout. (The model's parameter registry provides it; the optimizer layer
// does not depend on the model.)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3::optim {

struct ParamSlot {
  std::string name;
  Shape shape;
  size_t offset = 0;  // floats, into the flat buffers
  int64_t numel() const { return shape_numel(shape); }
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
