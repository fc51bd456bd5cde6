// What an optimizer sees of the model: named ranges of one flat value buffer and one flat gradient
// buffer with the same layout. (The model's parameter registry provides it; the optimizer layer
// does not depend on the model.)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3 {

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

}  // namespace k3
