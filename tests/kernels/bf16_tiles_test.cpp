// The attention tiles' bf16 products (attention_tiles.h) against double sums of the same
// bf16-rounded operands: only fp32 accumulation may separate them. The test binary runs once more
// with ONEDNN_MAX_CPU_ISA=AVX2 (tests/CMakeLists.txt), where the products take the fused
// multiply-add path instead of vdpbf16ps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/gemm.h"
#include "k3/tensor/bf16.h"

namespace k3::kernels::attn {
namespace {

double rounded_value(float x) { return bf16_to_float(float_to_bf16(x)); }

const char* band_name(Band b) {
  switch (b) {
    case Band::ColLe:
      return "ColLe";
    case Band::ColGe:
      return "ColGe";
    case Band::KLe:
      return "KLe";
    case Band::KGe:
      return "KGe";
  }
  return "?";
}

TEST(Bf16Tiles, PathFollowsOneDnnInstructionSet) {
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  std::printf("bf16 dot products: %s (ONEDNN_MAX_CPU_ISA=%s)\n",
              bf16_dot_products() ? "vdpbf16ps" : "fp32 on rounded operands", isa ? isa : "");
  if (isa && std::strcmp(isa, "AVX2") == 0) {
    EXPECT_FALSE(bf16_dot_products());
  }
}

// One product C = A·B in bf16 over a band, checked entry by entry. A's entries outside a K band
// hold NaN: the product must drop those terms, not multiply them by zero.
void check_product(Dims d, bool trans, Band band, int64_t off, bool accumulate, uint64_t seed) {
  const int64_t lda = (trans ? d.M : d.K) + 3, ldb = d.N + 5, ldc = d.N + 2;
  std::vector<float> A = testing::random_vec((trans ? d.K : d.M) * lda, seed, -2, 2);
  const std::vector<float> B = testing::random_vec(d.K * ldb, seed + 1, -2, 2);
  std::vector<float> C = testing::random_vec(d.M * ldc, seed + 2);
  const std::vector<float> C0 = C;
  auto a_at = [&](int64_t r, int64_t k) -> float& {
    return trans ? A[k * lda + r] : A[r * lda + k];
  };
  auto term_in_band = [&](int64_t r, int64_t k) {
    return band == Band::KLe ? k <= r + off : band == Band::KGe ? k >= r + off : true;
  };
  for (int64_t r = 0; r < d.M; ++r)
    for (int64_t k = 0; k < d.K; ++k)
      if (!term_in_band(r, k)) a_at(r, k) = std::numeric_limits<float>::quiet_NaN();

  tile_gemm(d, {A.data(), lda, trans}, {B.data(), ldb}, {C.data(), ldc, accumulate}, {band, off},
            Precision::BF16);

  const std::string where = "M=" + std::to_string(d.M) + " N=" + std::to_string(d.N) +
                            " K=" + std::to_string(d.K) + (trans ? " Aᵀ " : " A ") +
                            band_name(band) + " off=" + std::to_string(off) +
                            (accumulate ? " accumulate" : "");
  int failures = 0;
  for (int64_t r = 0; r < d.M && failures < 3; ++r)
    for (int64_t c = 0; c < d.N && failures < 3; ++c) {
      if ((band == Band::ColLe && c > r + off) || (band == Band::ColGe && c < r + off)) continue;
      double sum = accumulate ? C0[r * ldc + c] : 0.0, size = std::abs(sum);
      for (int64_t k = 0; k < d.K; ++k) {
        if (!term_in_band(r, k)) continue;
        const double t = rounded_value(a_at(r, k)) * rounded_value(B[k * ldb + c]);
        sum += t;
        size += std::abs(t);
      }
      // Summing K + 1 terms in fp32: each partial sum rounds once (unit roundoff 2^-24).
      const double bound = (d.K + 2) * std::ldexp(1.0, -24) * size + 1e-30;
      const double got = C[r * ldc + c];
      if (!(std::abs(got - sum) <= bound)) {
        ADD_FAILURE() << where << ": C[" << r << "][" << c << "] = " << got << ", expected " << sum
                      << " within " << bound;
        ++failures;
      }
    }
  // The padding between rows is left as it was.
  for (int64_t r = 0; r < d.M; ++r)
    for (int64_t c = d.N; c < ldc; ++c) ASSERT_EQ(C[r * ldc + c], C0[r * ldc + c]) << where;
}

TEST(Bf16Tiles, ProductMatchesDoubleSumOfRoundedOperands) {
  const Dims shapes[] = {{1, 1, 1},       {7, 17, 15},    {16, 64, 2}, {64, 64, 64},
                         {128, 128, 128}, {13, 100, 129}, {6, 33, 48}, {128, 24, 63}};
  uint64_t seed = 1;
  for (const Dims& d : shapes)
    for (bool trans : {false, true})
      for (Band band : {Band::ColLe, Band::ColGe, Band::KLe, Band::KGe})
        for (bool accumulate : {false, true}) {
          const int64_t span = band == Band::KLe || band == Band::KGe ? d.K : d.N;
          for (int64_t off : {int64_t{0}, int64_t{-1}, int64_t{1}, span / 3, -span / 2, span + 8})
            check_product(d, trans, band, off, accumulate, seed += 3);
        }
}

// The scores helper adds the shared key part as a second product in the shape's precision, from
// its right operand as it is or rounded once beforehand (scores_rhs): the same either way.
TEST(Bf16Tiles, ScoresRoundBothParts) {
  AttentionShape s{1, 1, 1, 23, 9, 16, 0};
  s.precision = Precision::BF16;
  const int64_t M = 40, N = 50, dqt = s.dqk + s.dr;
  const std::vector<float> an = testing::random_vec(M * s.dqk, 5),
                           ar = testing::random_vec(M * s.dr, 6),
                           bt = testing::random_vec(dqt * kBlock, 7);
  std::vector<uint32_t> rounded(scores_rhs_words(s));
  std::vector<float> out(kBlock * kBlock), out_rounded(kBlock * kBlock);
  scores(s, M, N, {an.data(), s.dqk, false}, {ar.data(), s.dr, false}, {bt.data(), {}, {}},
         out.data(), {Band::ColLe, N});
  scores(s, M, N, {an.data(), s.dqk, false}, {ar.data(), s.dr, false},
         scores_rhs(s, bt.data(), N, rounded.data()), out_rounded.data(), {Band::ColLe, N});
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      double sum = 0, size = 0;
      for (int64_t k = 0; k < dqt; ++k) {
        const double a = rounded_value(k < s.dqk ? an[r * s.dqk + k] : ar[r * s.dr + k - s.dqk]);
        const double t = a * rounded_value(bt[k * kBlock + c]);
        sum += t;
        size += std::abs(t);
      }
      ASSERT_NEAR(out[r * kBlock + c], sum, (dqt + 2) * std::ldexp(1.0, -24) * size)
          << r << " " << c;
      ASSERT_EQ(out_rounded[r * kBlock + c], out[r * kBlock + c]) << r << " " << c;
    }
}

}  // namespace
}  // namespace k3::kernels::attn
