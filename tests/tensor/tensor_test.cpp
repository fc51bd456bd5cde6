#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "k3/base/error.h"
#include "k3/tensor/bf16.h"
#include "k3/tensor/safetensors.h"
#include "k3/tensor/tensor.h"

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

TEST(Safetensors, RoundTripAndValidation) {
  Safetensors st;
  Tensor a = Tensor::empty({2, 3});
  for (int i = 0; i < 6; ++i) a.f32()[i] = 0.5f * float(i);
  Tensor b = Tensor::empty({4}, DType::BF16);
  for (int i = 0; i < 4; ++i) b.bf16()[i] = float_to_bf16(float(i));
  st.tensors = {{"a", a}, {"b", b}};
  st.metadata["step"] = "7";
  std::string bytes = encode_safetensors(st);
  Safetensors back = decode_safetensors(bytes, "mem");
  EXPECT_EQ(back.metadata.at("step"), "7");
  const Tensor& a2 = back.get("a", {2, 3});
  EXPECT_EQ(std::memcmp(a2.data(), a.data(), a.nbytes()), 0);
  EXPECT_EQ(encode_safetensors(back), bytes);
  EXPECT_THROW(back.get("a", {3, 2}), Error);
  EXPECT_THROW(back.get("missing", {1}), Error);
  EXPECT_THROW(decode_safetensors(bytes.substr(0, bytes.size() - 1), "truncated"), Error);
  EXPECT_THROW(decode_safetensors("abc", "tiny"), Error);
  std::string bad = bytes;
  bad[10] = '#';  // break the JSON header
  EXPECT_THROW(decode_safetensors(bad, "bad"), Error);
}

}  // namespace k3
