// Tensor: a shape, a dtype and a view of contiguous storage. A tensor either owns its storage
// (shared, reference-counted) or views memory owned elsewhere (an arena, a flat parameter buffer).
// Views along the leading dimension (slice, select) share the storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "k3/tensor/dtype.h"

namespace k3 {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(Shape shape, DType dtype = DType::F32);  // owned, 64-byte aligned, uninitialized
  static Tensor zeros(Shape shape, DType dtype = DType::F32);
  static Tensor view(void* data, Shape shape, DType dtype = DType::F32);

  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* data() const { return data_; }
  float* f32() const;      // checks the dtype
  uint16_t* bf16() const;  // checks the dtype

  Tensor slice(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0
  Tensor select(int64_t i) const;                  // row i of dim 0, one dimension fewer
  Tensor reshape(Shape shape) const;               // same numel, same storage
  void zero_() const;
  void copy_from(const Tensor& src) const;         // same shape and dtype

 private:
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::F32;
};

}  // namespace k3
