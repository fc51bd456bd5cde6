#include "k3/kernels/gemm.h"

#include <cmath>
#include <limits>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using kernels::GemmArgs;
using testing::cast_vec;
using testing::random_vec;

struct Case {
  int64_t M, N, K;
};

// Fast fp32 gemm against the double reference, with padded leading dimensions.
void check_gemm(const Case& s, bool ta, bool tb, float alpha, float beta, uint64_t seed) {
  const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 2;
  auto A = random_vec((ta ? s.K : s.M) * lda, seed);
  auto B = random_vec((tb ? s.N : s.K) * ldb, seed + 1);
  auto C = random_vec(s.M * ldc, seed + 2);
  if (beta == 0) C.assign(C.size(), std::numeric_limits<float>::quiet_NaN());  // must be ignored
  auto Cr = cast_vec<double>(C);
  kernels::gemm(
      GemmArgs{ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc});
  ref::gemm<double>(ta, tb, s.M, s.N, s.K, alpha, cast_vec<double>(A).data(), lda,
                    cast_vec<double>(B).data(), ldb, beta, Cr.data(), ldc);
  for (int64_t i = 0; i < s.M; ++i)  // padding columns of C are not compared (NaN when beta = 0)
    for (int64_t j = 0; j < s.N; ++j)
      ASSERT_NEAR(C[i * ldc + j], Cr[i * ldc + j], 1e-5 * (1 + std::sqrt(double(s.K))))
          << "M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << ta << " tb=" << tb
          << " i=" << i << " j=" << j;
}

TEST(Gemm, MatchesReferenceAllTransposes) {
  const Case cases[] = {{1, 1, 1}, {1, 9, 4}, {6, 1, 11}, {13, 7, 1}, {31, 17, 45}, {64, 96, 130}};
  uint64_t seed = 1;
  for (const Case& s : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_gemm(s, ta, tb, 1.0f, 0.0f, seed += 3);
        check_gemm(s, ta, tb, -0.75f, 1.0f, seed += 3);  // accumulate, alpha != 1
        check_gemm(s, ta, tb, 1.5f, 0.5f, seed += 3);
      }
}

// Products of at least 64 MFLOP in the A·Bᵀ and tall Aᵀ·B forms run on the matmul primitive
// (gemm.cpp): the same contract, strides, alpha and beta included.
TEST(Gemm, LargeProductsMatchReference) {
  const Case cases[] = {{300, 170, 1000}, {1100, 60, 520}};  // bulk + rest: 256 + 44, 512 + 8
  uint64_t seed = 100;
  for (const Case& s : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_gemm(s, ta, tb, 1.0f, 0.0f, seed += 3);
        check_gemm(s, ta, tb, -0.75f, 1.0f, seed += 3);
      }
}

TEST(Gemm, ContiguousShorthand) {
  const int64_t M = 5, N = 7, K = 3;
  auto A = random_vec(K * M, 10), B = random_vec(N * K, 11);
  std::vector<float> C(M * N);
  std::vector<double> Cr(M * N);
  kernels::gemm(true, true, M, N, K, 2.0f, A.data(), B.data(), 0.0f, C.data());
  ref::gemm<double>(true, true, M, N, K, 2.0, cast_vec<double>(A).data(), M,
                    cast_vec<double>(B).data(), K, 0.0, Cr.data(), N);
  K3_EXPECT_CLOSE(C, Cr, 1e-5, 1e-5);
}

TEST(Gemm, StridedBatched) {
  const int64_t batch = 3, M = 9, N = 5, K = 6, lda = 10, ldb = 7, ldc = 6;
  const int64_t sa = K * lda + 4, sb = N * ldb + 1, sc = M * ldc + 2;  // A: [K, M]ᵀ, B: [N, K]ᵀ
  auto A = random_vec(batch * sa, 20), B = random_vec(batch * sb, 21),
       C = random_vec(batch * sc, 22);
  auto Cr = cast_vec<double>(C);
  const auto Ad = cast_vec<double>(A), Bd = cast_vec<double>(B);
  kernels::gemm_batched(
      GemmArgs{true, true, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, C.data(), ldc}, batch,
      sa, sb, sc);
  for (int64_t b = 0; b < batch; ++b)
    ref::gemm<double>(true, true, M, N, K, 0.5, Ad.data() + b * sa, lda, Bd.data() + b * sb, ldb,
                      1.0, Cr.data() + b * sc, ldc);
  K3_EXPECT_CLOSE(C, Cr, 1e-5, 1e-5);
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  std::vector<float> C = {1, 2, 3, 4};
  kernels::gemm(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, C.data());
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2}));
}

TEST(Gemm, RejectsBadLeadingDimension) {
  std::vector<float> A(6), B(6), C(4);
  EXPECT_THROW(
      kernels::gemm(GemmArgs{false, false, 2, 2, 3, 1, A.data(), 2, B.data(), 2, 0, C.data(), 2}),
      Error);
}

}  // namespace
}  // namespace k3
