// exp, exp2, sigmoid, tanh and sqrt in plain arithmetic, so that loops marked `#pragma omp simd`
// vectorize (calls into libm do not). Accurate to a few ulp (relative) over the float range that
// matters.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace k3::kernels::fast {

// Below kExpLo exp() is a denormal (returned as 0); above kExpHi it is within 2x of overflow
// (returned as +inf). Keeping n in [-126, 127] lets 2^n be built directly from exponent bits.
inline constexpr float kExpLo = -87.0f;
inline constexpr float kExpHi = 88.0f;

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2 = 0.693147180559945309f;

// x = n ln2 + r with |r| <= ln2/2: returns 2^n and expm1(r). x must lie in [kExpLo, kExpHi].
struct ExpParts {
  float pow2n;
  float em1;
};

inline ExpParts exp_parts(float x) {
  constexpr float kLn2Hi = 0.693359375f;  // few mantissa bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x));
  // Taylor series of expm1 to r^7: truncation below 3e-8 relative for |r| <= ln2/2.
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return {std::bit_cast<float>(bits), p * r};
}

inline float exp(float x) {
  const ExpParts e = exp_parts(std::clamp(x, kExpLo, kExpHi));
  const float y = std::fma(e.pow2n, e.em1, e.pow2n);
  return x < kExpLo ? 0.0f : (x > kExpHi ? INFINITY : y);
}

// 2^x for x <= 0 in plain arithmetic that vectorizes under `omp simd`, to ~1 ulp. Arguments
// below -126 (and -inf) give 2^-126, negligible next to the softmax sums (>= 1) they feed
// (attention's softmax runs in base 2: scores scaled by scale * kLog2e, one exp2 each).
// Cheaper than a general exp: no overflow or infinity handling.
inline float exp2_nonpositive(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  x = std::max(x, -126.0f);
  const float n = (x + kRound) - kRound;
  const float f = x - n;  // [-0.5, 0.5]
  // Minimax polynomial for 2^f on [-0.5, 0.5], relative error 2e-9.
  float p = 1.534579496e-4f;
  p = p * f + 1.339993207e-3f;
  p = p * f + 9.618489072e-3f;
  p = p * f + 5.550328642e-2f;
  p = p * f + 2.402264625e-1f;
  p = p * f + 6.931471825e-1f;
  p = p * f + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// sigmoid(x) and its complement 1 - sigmoid(x) = sigmoid(-x), both to full relative precision
// (backward passes need the complement; 1 - s would lose it where s is near 1). Deliberately not
// kernels::sigmoid (elementwise.h): this one is built on the polynomial exp above so the KDA and
// GLU loops vectorize, and its results differ from libm's by a few ulp.
struct SigmoidPair {
  float s, c;
};

inline SigmoidPair sigmoid_pair(float x) {
  const float e = exp(-std::fabs(x));  // in (0, 1]: no overflow
  const float big = 1.0f / (1.0f + e), small = e * big;
  return x >= 0 ? SigmoidPair{big, small} : SigmoidPair{small, big};
}

inline float sigmoid(float x) { return sigmoid_pair(x).s; }

// tanh(x) and its derivative 1 - tanh²(x), both to full relative precision. With E = exp(-2|x|)
// and m = E - 1 (computed as expm1): tanh|x| = -m / (2 + m) and 1 - tanh² = 4 E / (2 + m)²; expm1
// keeps small |x| accurate, and neither subtracts nearby numbers.
struct TanhPair {
  float t, d;
};

inline TanhPair tanh_pair(float x) {
  const ExpParts e = exp_parts(std::max(-2.0f * std::fabs(x), kExpLo));
  const float m = std::fma(e.pow2n, e.em1, e.pow2n - 1.0f);
  const float E = std::fma(e.pow2n, e.em1, e.pow2n);
  const float inv = 1.0f / (2.0f + m);
  const float t = -m * inv;
  return {x < 0 ? -t : t, 4.0f * E * inv * inv};
}

inline float tanh(float x) { return tanh_pair(x).t; }

// sqrt(x) for x >= 0 (2 ulp; sqrt(0) = 0): three Newton steps on 1/sqrt(x) from a first guess
// read off the exponent bits. std::sqrt itself only vectorizes under -fno-math-errno.
inline float sqrt(float x) {
  float r = std::bit_cast<float>(0x5f375a86 - (std::bit_cast<int32_t>(x) >> 1));
  for (int i = 0; i < 3; ++i) r = r * (1.5f - 0.5f * x * r * r);
  return x * r;
}

}  // namespace k3::kernels::fast
