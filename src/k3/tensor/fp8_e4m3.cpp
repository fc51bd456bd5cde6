#include "k3/tensor/fp8_e4m3.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

namespace k3 {
namespace {

// Every code's value, built once from the format's definition.
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 0xF, m = c & 7;
      float a = e == 0 ? std::ldexp(static_cast<float>(m), -9)  // subnormal: m/8 · 2^-6
                       : std::ldexp(static_cast<float>(8 + m), e - 10);
      if (e == 15 && m == 7) a = NAN;
      v[static_cast<size_t>(c)] = c & 0x80 ? -a : a;
    }
    return v;
  }();
  return values;
}

int64_t blocks_of(int64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

}  // namespace

uint8_t float_to_e4m3(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f), sign = (x >> 24) & 0x80, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7F);       // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7E);      // |f| >= 448: saturate
  if (a < 0x3c800000u) {  // below 2^-6: the subnormals, steps of 2^-9 (exact scaling, then RNE)
    const long q = std::lrint(std::bit_cast<float>(a) * 512.f);
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(q));  // q = 8 is 2^-6 itself
  }
  // Round the 23-bit mantissa to 3 bits, to nearest even; a carry moves into the exponent. The
  // top 12 bits are then the float's exponent and 3 mantissa bits: rebias from 127 to 7.
  const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | std::min<uint32_t>(r - ((127u - 7u) << 3), 0x7E));
}

float e4m3_to_float(uint8_t code) { return e4m3_values()[code]; }

size_t fp8_block_bytes(int64_t n) {
  return static_cast<size_t>(blocks_of(n)) * sizeof(float) + static_cast<size_t>(n);
}

void fp8_block_encode(const float* x, int64_t n, void* out) {
  const int64_t blocks = blocks_of(n);
  auto* scales = static_cast<float*>(out);
  auto* codes = reinterpret_cast<uint8_t*>(scales + blocks);
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kFp8Block, hi = std::min(n, lo + kFp8Block);
    float amax = 0;
    for (int64_t i = lo; i < hi; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float scale = amax > 0 ? amax / kFp8Max : 1.f, inv = 1.f / scale;
    scales[b] = scale;
    for (int64_t i = lo; i < hi; ++i) codes[i] = float_to_e4m3(x[i] * inv);
  }
}

void fp8_block_decode(const void* in, int64_t n, float* x) {
  const int64_t blocks = blocks_of(n);
  const auto* scales = static_cast<const float*>(in);
  const auto* codes = reinterpret_cast<const uint8_t*>(scales + blocks);
  const std::array<float, 256>& values = e4m3_values();
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kFp8Block, hi = std::min(n, lo + kFp8Block);
    for (int64_t i = lo; i < hi; ++i) x[i] = values[codes[i]] * scales[b];
  }
}

}  // namespace k3
