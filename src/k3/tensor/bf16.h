// bfloat16: the top 16 bits of an IEEE float, rounded to nearest even.
#pragma once

#include <bit>
#include <cstdint>

namespace k3 {

inline uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round half to even
  return static_cast<uint16_t>(x >> 16);
}

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Vectorized (AVX512-BF16 where the build targets it; denormal inputs then become zero) and
// multi-threaded above 64K elements unless called inside a parallel region.
void float_to_bf16(const float* in, uint16_t* out, int64_t n);
void bf16_to_float(const uint16_t* in, float* out, int64_t n);

}  // namespace k3
