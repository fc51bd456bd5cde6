#include "k3/tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include "k3/base/error.h"

namespace k3 {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

static void check_shape(const Shape& s) {
  for (int64_t d : s) K3_CHECK(d >= 0, "negative dimension in shape ", shape_str(s));
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  check_shape(shape);
  Tensor t;
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
  K3_CHECK(p || rounded == 0, "out of memory allocating ", bytes, " bytes for ", shape_str(shape));
  t.owner_ = std::shared_ptr<void>(p, std::free);
  t.data_ = p;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.zero_();
  return t;
}

Tensor Tensor::view(void* data, Shape shape, DType dtype) {
  check_shape(shape);
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  K3_CHECK(i >= 0 && i < n, "dimension ", i, " out of range for shape ", shape_str(shape_));
  return shape_[static_cast<size_t>(i)];
}

float* Tensor::f32() const {
  K3_CHECK(dtype_ == DType::F32, "tensor is ", dtype_name(dtype_), ", expected F32");
  return static_cast<float*>(data_);
}

uint16_t* Tensor::bf16() const {
  K3_CHECK(dtype_ == DType::BF16, "tensor is ", dtype_name(dtype_), ", expected BF16");
  return static_cast<uint16_t*>(data_);
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  K3_CHECK(ndim() >= 1, "cannot slice a scalar tensor");
  K3_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ", end,
           ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  t.shape_[0] = end - begin;
  size_t row_bytes = nbytes() / static_cast<size_t>(shape_[0] ? shape_[0] : 1);
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin) * row_bytes;
  return t;
}

Tensor Tensor::select(int64_t i) const {
  Tensor t = slice(i, i + 1);
  t.shape_.erase(t.shape_.begin());
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  check_shape(shape);
  K3_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_str(shape_), " to ",
           shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::zero_() const {
  if (nbytes()) std::memset(data_, 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) const {
  K3_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy from ", shape_str(src.shape_), " ",
           dtype_name(src.dtype_), " into ", shape_str(shape_), " ", dtype_name(dtype_));
  if (nbytes()) std::memcpy(data_, src.data_, nbytes());
}

}  // namespace k3
