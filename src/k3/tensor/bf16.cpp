#include "k3/tensor/bf16.h"

#include <algorithm>

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

namespace k3 {

// One thread's share: with AVX512-BF16, 32 floats per vcvtne2ps2bf16, the last fewer than 32
// masked (round to nearest even, the scalar rounding, except that the instruction flushes
// denormal inputs to zero). Short rows (the attention tiles') then convert as fast as long ones.
static void convert_span(const float* in, uint16_t* out, int64_t n) {
#ifdef __AVX512BF16__
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t left = std::min<int64_t>(32, n - i);
    const auto mask = static_cast<__mmask32>(0xFFFFFFFFu >> (32 - left));
    const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), in + i);
    const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), in + i + 16);
    _mm512_mask_storeu_epi16(out + i, mask, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
#else
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
#endif
}

void float_to_bf16(const float* in, uint16_t* out, int64_t n) {
  constexpr int64_t kPerThread = 1 << 16;
  if (n <= kPerThread) return convert_span(in, out, n);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n; b += kPerThread) convert_span(in + b, out + b, std::min(kPerThread, n - b));
  }
}

void bf16_to_float(const uint16_t* in, float* out, int64_t n) {
#pragma omp parallel if (n > 65536)
#pragma omp for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

}  // namespace k3
