// safetensors files: an 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// data, which the tensors' byte ranges must cover exactly (no overlap, no bytes left over).
// Files too large to hold in memory are written tensor by tensor (SafetensorsWriter) and read
// tensor by tensor (TensorFile).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "k3/base/checksum.h"
#include "k3/base/fs.h"
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
  size_t nbytes() const { return end - begin; }
};

struct SafetensorsLayout {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;
  size_t data_begin = 0;  // 8 + the header length
};

// Refuses names used twice and the reserved name __metadata__.
std::string encode_safetensors(const Safetensors& st);
// The first bytes of a file holding the tensors of ENTRIES (name, dtype, shape) in this order:
// the 8-byte length and the JSON header, padded so that the data is 8-byte aligned. Sets each
// entry's byte range. Refuses names as encode_safetensors does.
std::string encode_safetensors_header(std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata);
// Reads and checks the header against the file's size, without allocating any tensor. On success
// the entries' ranges tile the data exactly, so decoding allocates no more than the file holds.
SafetensorsLayout read_safetensors_layout(const std::string& bytes, const std::string& origin);
// The layout's tensors, copied out of the bytes. Every error names the file and, where there is
// one, the tensor.
Safetensors decode_safetensors(const std::string& bytes, const std::string& origin);

void save_safetensors(const std::string& path, const Safetensors& st);  // atomic
Safetensors load_safetensors(const std::string& path);

// Writes a safetensors file tensor by tensor, hashing it as it goes: the header first, then each
// entry's bytes in order. The file's bytes are encode_safetensors's for the same tensors. It is
// written in place (FileWriter): put it where a crash leaves nothing under a final name.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                    const std::map<std::string, std::string>& metadata = {});
  // The next entry's bytes, all of them (nbytes() of it) in one call.
  void write(const void* data, size_t nbytes);
  // After the last entry: the file is synced and closed; its size and SHA-256 (hex).
  struct Written {
    uint64_t bytes = 0;
    std::string sha256;
  };
  Written finish();

 private:
  void append(std::string_view bytes);
  FileWriter file_;
  std::vector<SafetensorsEntry> entries_;
  size_t next_ = 0;  // the entry whose bytes come next
  Sha256 hash_;
  uint64_t bytes_ = 0;
};

// A safetensors file read tensor by tensor: opening reads and checks the header only (as
// read_safetensors_layout does); a tensor's bytes are read from the file (pread) when asked for,
// into the caller's memory. Errors name the file and the tensor.
class TensorFile {
 public:
  TensorFile() = default;  // no file: no entries
  explicit TensorFile(FileReader file);

  const std::string& path() const;
  const std::vector<SafetensorsEntry>& entries() const { return layout_.entries; }  // data order
  const std::map<std::string, std::string>& metadata() const { return layout_.metadata; }
  const SafetensorsEntry* find(const std::string& name) const;  // null when absent
  // The named entry, refused as Safetensors::get refuses a tensor.
  const SafetensorsEntry& get(const std::string& name, const Shape& shape,
                              DType dtype = DType::F32) const;
  // An F32 entry of this file: its values (numel floats) into OUT.
  void read(const SafetensorsEntry& entry, float* out) const;
  // An entry of this file as a new tensor of its own, for small ones.
  Tensor tensor(const SafetensorsEntry& entry) const;

 private:
  void read_bytes(const SafetensorsEntry& entry, void* out) const;
  std::optional<FileReader> file_;
  SafetensorsLayout layout_;
  std::unordered_map<std::string, size_t> by_name_;  // index into the entries
};

}  // namespace k3
