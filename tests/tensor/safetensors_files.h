// Hand-made safetensors files for the reader's tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

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

}  // namespace k3::testing
