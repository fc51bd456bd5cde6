#include "k3/tensor/dtype.h"

#include "k3/base/error.h"

namespace k3 {

size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }

const char* dtype_name(DType t) { return t == DType::F32 ? "F32" : "BF16"; }

DType parse_dtype(const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "BF16") return DType::BF16;
  throw Error("unknown dtype '" + name + "' (expected F32 or BF16)");
}

}  // namespace k3
