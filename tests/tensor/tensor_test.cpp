#include "k3/tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "k3/base/error.h"
#include "k3/tensor/bf16.h"

namespace k3 {

TEST(Tensor, SliceSelectReshapeShareStorage) {
  Tensor t = Tensor::empty({4, 3});
  for (int i = 0; i < 12; ++i) t.f32()[i] = float(i);
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(s.f32()[0], 3.f);
  Tensor r = t.select(3);
  EXPECT_EQ(r.shape(), (Shape{3}));
  EXPECT_EQ(r.f32()[2], 11.f);
  EXPECT_EQ(t.reshape({2, 6}).f32(), t.f32());
  EXPECT_THROW(t.reshape({5}), Error);
  EXPECT_THROW(t.slice(2, 5), Error);
  EXPECT_THROW(t.bf16(), Error);
  EXPECT_EQ(Tensor::zeros({1, 0}).numel(), 0);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
}

// The array conversion (vectorized, threaded above 64K elements) rounds every normal value, tie,
// infinity and NaN as the scalar one does, in its vector body and its tail.
TEST(Bf16, ArrayConversionMatchesScalar) {
  std::vector<float> x = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8), -0.0f,
                          std::numeric_limits<float>::infinity(), -3e38f, 1e-37f,
                          std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  while (x.size() < 200003) x.push_back(u(rng));
  std::vector<uint16_t> out(x.size());
  float_to_bf16(x.data(), out.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isnan(x[i]))
      EXPECT_TRUE(std::isnan(bf16_to_float(out[i])));
    else
      ASSERT_EQ(out[i], float_to_bf16(x[i])) << "element " << i << " = " << x[i];
}

}  // namespace k3
