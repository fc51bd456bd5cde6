// Element types. bf16 and fp8/mxfp4 storage formats are added here as the layers need them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace k3 {

enum class DType : uint8_t { F32, BF16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);           // "F32", "BF16": the safetensors spelling
DType parse_dtype(const std::string& name);  // throws on an unknown name

}  // namespace k3
