// safetensors files: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the bytes.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3 {

struct Safetensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;

  const Tensor* find(const std::string& name) const;
  // The named tensor; throws an Error naming it when it is missing or its shape/dtype differ.
  const Tensor& get(const std::string& name, const Shape& shape, DType dtype = DType::F32) const;
};

std::string encode_safetensors(const Safetensors& st);
// Decodes and validates: header size and JSON, dtypes, shapes, offsets inside the data, no overlap.
Safetensors decode_safetensors(const std::string& bytes, const std::string& origin);

void save_safetensors(const std::string& path, const Safetensors& st);  // atomic
Safetensors load_safetensors(const std::string& path);

}  // namespace k3
