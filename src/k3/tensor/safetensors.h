// safetensors files: an 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// data, which the tensors' byte ranges must cover exactly (no overlap, no bytes left over).
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

// Where one tensor's bytes lie.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  size_t begin = 0, end = 0;  // byte range within the data that follows the header
};

struct SafetensorsLayout {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
  size_t data_begin = 0;  // 8 + the header length
};

// Refuses names used twice and the reserved name __metadata__.
std::string encode_safetensors(const Safetensors& st);
// Reads and checks the header against the file's size, without allocating any tensor. On success
// the entries' ranges tile the data exactly, so decoding allocates no more than the file holds.
SafetensorsLayout read_safetensors_layout(const std::string& bytes, const std::string& origin);
// The layout's tensors, copied out of the bytes. Every error names the file and, where there is
// one, the tensor.
Safetensors decode_safetensors(const std::string& bytes, const std::string& origin);

void save_safetensors(const std::string& path, const Safetensors& st);  // atomic
Safetensors load_safetensors(const std::string& path);

}  // namespace k3
