// Hand-made safetensors files and tensors for the reader's tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "k3/tensor/tensor.h"

namespace k3::testing {

// The 8-byte little-endian length field followed by `header` and `data_size` bytes of data.
inline std::string safetensors_file(const std::string& header, size_t data_size,
                                    uint64_t header_size_field) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &header_size_field, 8);
  out += header;
  for (size_t i = 0; i < data_size; ++i) out += static_cast<char>(7 * i + 1);
  return out;
}

inline std::string safetensors_file(const std::string& header, size_t data_size) {
  return safetensors_file(header, data_size, header.size());
}

// One header entry: "name":{"dtype":..,"shape":..,"data_offsets":[begin,end]}.
inline std::string tensor_entry(const std::string& name, const std::string& dtype,
                                const std::string& shape, const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

// A tensor of random bytes.
inline Tensor filled(Shape shape, DType dtype, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  for (size_t i = 0; i < t.nbytes(); ++i) static_cast<uint8_t*>(t.data())[i] = rng();
  return t;
}

}  // namespace k3::testing
