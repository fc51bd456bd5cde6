// SHA-256 (FIPS 180-4), used to detect corrupt or truncated files.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace k3 {

// Incremental hashing, for data that arrives in pieces.
class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  std::array<uint8_t, 32> digest();  // finishes the hash; call once
  std::string hex_digest();          // digest() as 64 lowercase hex digits

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view bytes);

}  // namespace k3
