// FP8 E4M3 against its definition: the codes' values, rounding to the nearest code (ties to the
// even code) found by searching all of them, saturation, and the block codec's error bound; the
// vectorized block codec against the scalar one.
#include "k3/tensor/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace k3 {
namespace {

// The value of a code from the format's fields, written out independently of the codec.
double value_of(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double v = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -v : v;
}

// The nearest finite code by search; a tie goes to the code with an even mantissa.
int nearest(float f) {
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    const double d = std::fabs(value_of(c) - static_cast<double>(f));
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

TEST(Fp8E4M3, EveryCodeDecodesToItsValueAndBack) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(e4m3_to_float(static_cast<uint8_t>(c))));
      continue;
    }
    EXPECT_EQ(static_cast<double>(e4m3_to_float(static_cast<uint8_t>(c))), value_of(c)) << c;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.f, -9));
}

TEST(Fp8E4M3, RoundsToTheNearestCodeTiesToEvenAndSaturates) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12, 9.5f), sign(-1, 1);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::copysign(std::exp2(exponent(rng)), sign(rng));
    if (std::fabs(f) >= 448) {
      EXPECT_EQ(e4m3_to_float(float_to_e4m3(f)), std::copysign(448.f, f)) << f;
      continue;
    }
    // (compared as values: a negative value that rounds to zero keeps its sign, -0 = 0)
    EXPECT_EQ(e4m3_to_float(float_to_e4m3(f)), e4m3_to_float(static_cast<uint8_t>(nearest(f))))
        << f;
  }
  // Midpoints between neighbours go to the even code.
  for (int c = 0; c < 0x7D; ++c) {
    const float mid = static_cast<float>((value_of(c) + value_of(c + 1)) / 2);
    EXPECT_EQ(float_to_e4m3(mid), (c & 1) ? c + 1 : c) << c;
  }
  EXPECT_EQ(float_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7E);
  EXPECT_TRUE(std::isnan(e4m3_to_float(float_to_e4m3(NAN))));
}

TEST(Fp8E4M3, BlocksKeepThreeMantissaBitsOfTheirRange) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1);
  const int64_t n = 1000;  // 7 full blocks and a partial one
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * (i < 128 ? 1e-6f : i < 256 ? 1e4f : 1.f);
  x[300] = 0;
  std::vector<char> codes(fp8_block_bytes(n));
  EXPECT_EQ(codes.size(), 8 * sizeof(float) + n);
  fp8_block_encode(x.data(), n, codes.data());
  fp8_block_decode(codes.data(), n, y.data());
  for (int64_t b = 0; b * kFp8Block < n; ++b) {
    float amax = 0;
    for (int64_t i = b * kFp8Block; i < std::min(n, (b + 1) * kFp8Block); ++i)
      amax = std::max(amax, std::fabs(x[i]));
    const float step = amax / 448 * std::ldexp(1.f, -9);  // the subnormals' spacing
    for (int64_t i = b * kFp8Block; i < std::min(n, (b + 1) * kFp8Block); ++i)
      EXPECT_LE(std::fabs(y[i] - x[i]), std::fabs(x[i]) / 16 + step) << i;
  }
  EXPECT_EQ(y[300], 0.f);
}

// The vectorized codec writes the scalar codec's bytes and decodes to its values, bit for bit, on
// blocks of every kind: ordinary values over many magnitudes, values that round to subnormals and
// to zero, ties, saturation, infinities and NaNs, all-zero blocks, and lengths that end inside a
// block and inside a vector.
TEST(Fp8E4M3, VectorizedCodecEqualsTheScalarOne) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-30, 30), unit(0, 1);
  for (int64_t n : {1, 15, 16, 17, 127, 128, 129, 1000, 4096, 70001}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float u = unit(rng);
      float v = std::exp2(exponent(rng)) * (u < 0.5f ? -1.f : 1.f);
      if (u < 0.01f) v = 0;
      else if (u < 0.012f) v = std::numeric_limits<float>::quiet_NaN();
      else if (u < 0.014f) v = u < 0.013f ? INFINITY : -INFINITY;
      else if (u < 0.02f) v = static_cast<float>(value_of(static_cast<int>(u * 1e4) % 0x7E));
      x[static_cast<size_t>(i)] = v;
    }
    for (int64_t i = 256; i < std::min<int64_t>(n, 384); ++i) x[static_cast<size_t>(i)] = 0;
    std::vector<char> fast(fp8_block_bytes(n)), slow(fp8_block_bytes(n));
    fp8_block_encode(x.data(), n, fast.data());
    ref::fp8_block_encode(x.data(), n, slow.data());
    ASSERT_EQ(std::memcmp(fast.data(), slow.data(), fast.size()), 0) << "n=" << n;
    std::vector<float> y(static_cast<size_t>(n)), z(static_cast<size_t>(n));
    fp8_block_decode(fast.data(), n, y.data());
    ref::fp8_block_decode(slow.data(), n, z.data());
    ASSERT_EQ(std::memcmp(y.data(), z.data(), y.size() * sizeof(float)), 0) << "n=" << n;
  }
}

}  // namespace
}  // namespace k3
