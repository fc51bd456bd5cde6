#include "k3/tensor/fp8_e4m3.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

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

namespace {

// The block layout: blocks_of(n) float scales, then one code per value.
struct BlockView {
  float* scales;
  uint8_t* codes;
};
BlockView block_view(void* out, int64_t n) {
  auto* scales = static_cast<float*>(out);
  return {scales, reinterpret_cast<uint8_t*>(scales + blocks_of(n))};
}

// A block's scale: its largest magnitude over 448 (NaNs ignored, as std::fmax does); 1 for zeros.
float block_scale(float amax) { return amax > 0 ? amax / kFp8Max : 1.f; }

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
// Every lane. GCC 12's unmasked AVX-512 intrinsics merge into _mm512_undefined_*(), a variable
// initialized with itself, which -Wmaybe-uninitialized reports once the intrinsic sits in a loop
// (GCC bug 105593, fixed in GCC 13). Their zero-masking forms under this mask are the same
// instructions with a defined (zero) merge source, so the code below uses those.
constexpr __mmask16 kAll = 0xFFFF;

__m512i splat(int32_t v) { return _mm512_set1_epi32(v); }

// float_to_e4m3 on 16 lanes: the same integer steps, each case blended in by its mask.
__m128i e4m3_codes(__m512 f) {
  const __m512i x = _mm512_castps_si512(f), a = _mm512_and_si512(x, splat(0x7fffffff));
  const __m512i sign = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, x, 24), splat(0x80));
  const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(kAll, a, 20), splat(1));
  const __m512i r =
      _mm512_maskz_srli_epi32(kAll, _mm512_add_epi32(_mm512_add_epi32(a, splat(0x7ffff)), odd), 20);
  __m512i code =
      _mm512_maskz_min_epu32(kAll, _mm512_sub_epi32(r, splat((127 - 7) << 3)), splat(0x7E));
  // below 2^-6: the subnormals, |f| · 512 rounded to nearest even (the default rounding mode)
  const __m512i q =
      _mm512_maskz_cvtps_epi32(kAll, _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.f)));
  code = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(a, splat(0x3c800000)), code, q);
  code = _mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(a, splat(0x43e00000)), code, splat(0x7E));
  code = _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(a, splat(0x7f800000)), code, splat(0x7F));
  return _mm512_maskz_cvtepi32_epi8(kAll, _mm512_or_si512(code, sign));
}
#endif

void encode_block(const float* x, int64_t len, float* scale, uint8_t* codes) {
  int64_t i = 0;
  float amax = 0;
#if defined(__AVX512F__)
  __m512 vmax = _mm512_setzero_ps();
  for (; i + kLanes <= len; i += kLanes)  // a NaN lane keeps the running maximum, as fmax
    vmax = _mm512_maskz_max_ps(kAll, _mm512_abs_ps(_mm512_loadu_ps(x + i)), vmax);
  alignas(64) float lanes[kLanes];  // _mm512_reduce_max_ps would merge into undefined halves
  _mm512_store_ps(lanes, vmax);
  for (const float l : lanes) amax = l > amax ? l : amax;  // no lane is NaN
#endif
  for (int64_t j = i; j < len; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  *scale = block_scale(amax);
  const float inv = 1.f / *scale;
  i = 0;
#if defined(__AVX512F__)
  const __m512 vinv = _mm512_set1_ps(inv);
  for (; i + kLanes <= len; i += kLanes)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i),
                     e4m3_codes(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv)));
#endif
  for (; i < len; ++i) codes[i] = float_to_e4m3(x[i] * inv);
}

void decode_block(const uint8_t* codes, int64_t len, float scale, float* x) {
  const float* values = e4m3_values().data();
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vscale = _mm512_set1_ps(scale);
  for (; i + kLanes <= len; i += kLanes) {
    const __m512i idx = _mm512_maskz_cvtepu8_epi32(
        kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), kAll, idx, values, 4);
    _mm512_storeu_ps(x + i, _mm512_mul_ps(v, vscale));
  }
#endif
  for (; i < len; ++i) x[i] = values[codes[i]] * scale;
}

}  // namespace

void fp8_block_encode(const float* x, int64_t n, void* out) {
  const BlockView v = block_view(out, n);
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const int64_t lo = b * kFp8Block;
    encode_block(x + lo, std::min(kFp8Block, n - lo), v.scales + b, v.codes + lo);
  }
}

void fp8_block_decode(const void* in, int64_t n, float* x) {
  const BlockView v = block_view(const_cast<void*>(in), n);
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const int64_t lo = b * kFp8Block;
    decode_block(v.codes + lo, std::min(kFp8Block, n - lo), v.scales[b], x + lo);
  }
}

namespace ref {

void fp8_block_encode(const float* x, int64_t n, void* out) {
  const BlockView v = block_view(out, n);
  for (int64_t b = 0; b < blocks_of(n); ++b) {
    const int64_t lo = b * kFp8Block, hi = std::min(n, lo + kFp8Block);
    float amax = 0;
    for (int64_t i = lo; i < hi; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    v.scales[b] = block_scale(amax);
    const float inv = 1.f / v.scales[b];
    for (int64_t i = lo; i < hi; ++i) v.codes[i] = float_to_e4m3(x[i] * inv);
  }
}

void fp8_block_decode(const void* in, int64_t n, float* x) {
  const BlockView v = block_view(const_cast<void*>(in), n);
  for (int64_t i = 0; i < n; ++i) x[i] = e4m3_to_float(v.codes[i]) * v.scales[i / kFp8Block];
}

}  // namespace ref
}  // namespace k3
