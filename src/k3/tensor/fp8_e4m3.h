// FP8 E4M3 (the OCP "FN" variant: 4 exponent bits with bias 7, 3 mantissa bits, no infinities,
// 0x7F / 0xFF are NaN, largest finite ±448), and a block codec: every block of kFp8Block values
// shares one float scale (its largest magnitude over 448), so each value keeps 3 mantissa bits
// relative to its block's range. Encoding rounds to nearest even and saturates at ±448.
#pragma once

#include <cstddef>
#include <cstdint>

namespace k3 {

inline constexpr int64_t kFp8Block = 128;
inline constexpr float kFp8Max = 448.f;

uint8_t float_to_e4m3(float f);
float e4m3_to_float(uint8_t code);

// Bytes that n values take in block form: one float scale per block, then one code per value.
size_t fp8_block_bytes(int64_t n);
// Writes fp8_block_bytes(n) bytes to `out` (4-byte aligned). Vectorized (AVX-512 where the
// build targets it); the same bytes and values as the scalar codec below.
void fp8_block_encode(const float* x, int64_t n, void* out);
void fp8_block_decode(const void* in, int64_t n, float* x);

namespace ref {
// The block codec value by value, through float_to_e4m3 / e4m3_to_float: the reference of the
// vectorized one.
void fp8_block_encode(const float* x, int64_t n, void* out);
void fp8_block_decode(const void* in, int64_t n, float* x);
}  // namespace ref

}  // namespace k3
