#include "k3/kernels/gemm.h"

#include <cmath>
#include <limits>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/base/threads.h"
#include "k3/kernels/reference.h"
#include "k3/tensor/bf16.h"

namespace k3::gemm_test {
namespace {

using kernels::GemmArgs;
using testing::cast_vec;
using testing::random_vec;

struct Case {
  int64_t M, N, K;
};

// Fast gemm against the double reference (under bf16, of the operands rounded to bf16), with
// padded leading dimensions. Both accumulate in fp32, so the tolerance is fp32's under either.
void check_gemm(const Case& s, bool ta, bool tb, float alpha, float beta, uint64_t seed,
                kernels::Precision precision = kernels::Precision::F32) {
  const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 2;
  auto A = random_vec((ta ? s.K : s.M) * lda, seed);
  auto B = random_vec((tb ? s.N : s.K) * ldb, seed + 1);
  auto C = random_vec(s.M * ldc, seed + 2);
  if (beta == 0) C.assign(C.size(), std::numeric_limits<float>::quiet_NaN());  // must be ignored
  auto Cr = cast_vec<double>(C);
  kernels::gemm(GemmArgs{ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(),
                         ldc, precision});
  if (precision == kernels::Precision::BF16)
    ref::gemm_bf16(ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, Cr.data(),
                   ldc);
  else
    ref::gemm<double>(ta, tb, s.M, s.N, s.K, alpha, cast_vec<double>(A).data(), lda,
                      cast_vec<double>(B).data(), ldb, beta, Cr.data(), ldc);
  for (int64_t i = 0; i < s.M; ++i)  // padding columns of C are not compared (NaN when beta = 0)
    for (int64_t j = 0; j < s.N; ++j)
      ASSERT_NEAR(C[i * ldc + j], Cr[i * ldc + j], 1e-5 * (1 + std::sqrt(double(s.K))))
          << "M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << ta << " tb=" << tb
          << " i=" << i << " j=" << j << " " << kernels::precision_name(precision);
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
// (gemm.cpp), and A·Bᵀ of 128-255 rows from 16 MFLOP: the same contract, strides, alpha and beta
// included.
TEST(Gemm, LargeProductsMatchReference) {
  // bulk + rest: 256 + 44, 512 + 8; 128 and 255 rows whole
  const Case cases[] = {{300, 170, 1000}, {1100, 60, 520}, {128, 200, 330}, {255, 97, 400}};
  uint64_t seed = 100;
  for (const Case& s : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_gemm(s, ta, tb, 1.0f, 0.0f, seed += 3);
        check_gemm(s, ta, tb, -0.75f, 1.0f, seed += 3);
      }
}

// Under bf16 the operands are rounded, then multiplied with fp32 accumulation: the result is the
// rounded operands' product to fp32 accuracy, about 1e-2 away from the exact one at K = 130.
TEST(Gemm, Bf16MatchesRoundedOperandsReference) {
  const Case cases[] = {{1, 1, 1}, {6, 1, 11}, {31, 17, 45}, {64, 96, 130}, {300, 170, 1000}};
  uint64_t seed = 200;
  for (const Case& s : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_gemm(s, ta, tb, 1.0f, 0.0f, seed += 3, kernels::Precision::BF16);
        check_gemm(s, ta, tb, -0.75f, 1.0f, seed += 3, kernels::Precision::BF16);
      }
}

// A·Bᵀ of up to 8 rows (decoding's products) runs on k3lab's AVX512-BF16 kernel where the build
// has it (gemm_few_rows.h): every row count, a reduction with and without a last partial chunk of
// 32, B's rows in blocks and one by one, over the threads (N·K ≥ 65536) or not.
TEST(Gemm, Bf16FewRowsMatchRoundedOperandsReference) {
  const Case shapes[] = {{0, 13, 77}, {0, 8, 64}, {0, 5, 1}, {0, 301, 400}};
  uint64_t seed = 400;
  for (Case s : shapes)
    for (int64_t M = 1; M <= 9; ++M) {
      s.M = M;
      check_gemm(s, false, true, 1.0f, 0.0f, seed += 3, kernels::Precision::BF16);
      check_gemm(s, true, true, -0.75f, 1.0f, seed += 3, kernels::Precision::BF16);
    }
}

// Operands handed over already in bf16 (a weight's copy) give the converted product bit for bit,
// in one product and in a strided batch.
TEST(Gemm, Bf16OperandsGivenInBf16) {
  for (const int64_t M : {9, 2}) {  // on the matmul primitive, on the few-rows kernel
    const int64_t batch = 3, N = 5, K = 70, lda = 10, ldb = 73, ldc = 6;
    const int64_t sa = K * lda + 4, sb = N * ldb + 1, sc = M * ldc + 2;  // A: [K, M]ᵀ, B: [N, K]ᵀ
    auto A = random_vec(batch * sa, 30), B = random_vec(batch * sb, 31),
         C0 = random_vec(batch * sc, 32);
    std::vector<uint16_t> Ab(A.size()), Bb(B.size());
    float_to_bf16(A.data(), Ab.data(), static_cast<int64_t>(A.size()));
    float_to_bf16(B.data(), Bb.data(), static_cast<int64_t>(B.size()));
    const GemmArgs g{true, true,     M,   N,    K,       0.5f, A.data(),
                     lda,  B.data(), ldb, 1.0f, nullptr, ldc,  kernels::Precision::BF16};
    auto converted = C0, given = C0, given_a = C0;
    GemmArgs gc = g;
    gc.C = converted.data();
    kernels::gemm_batched(gc, batch, sa, sb, sc);
    GemmArgs gg = g;
    gg.C = given.data();
    gg.A = nullptr;
    gg.B = nullptr;
    gg.A_bf16 = Ab.data();
    gg.B_bf16 = Bb.data();
    kernels::gemm_batched(gg, batch, sa, sb, sc);
    EXPECT_EQ(converted, given);
    GemmArgs ga = g;  // one operand given, the other converted
    ga.C = given_a.data();
    ga.A_bf16 = Ab.data();
    kernels::gemm(ga);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) EXPECT_EQ(given_a[i * ldc + j], converted[i * ldc + j]);
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

// Small products in a batch run as one batched matmul primitive (gemm.cpp), larger ones one by
// one; in bf16 only a batch whose operands lie one after another (packed) is converted in one pass
// and batched, padded ones go one by one. Each against the reference (in bf16, of the operands
// rounded to bf16), every transpose, alpha and beta (beta = 0: C's NaNs ignored), at edge shapes
// and on each side of the size where the path changes.
TEST(Gemm, StridedBatched) {
  const Case cases[] = {{9, 5, 6}, {1, 1, 1}, {1, 17, 3}, {64, 64, 128}, {64, 64, 129}};
  uint64_t seed = 20;
  for (const auto precision : {kernels::Precision::F32, kernels::Precision::BF16})
    for (const bool packed : {false, true})
      for (const Case& s : cases)
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (const auto& [alpha, beta] :
                 {std::pair{0.5f, 1.0f}, {1.0f, 0.0f}, {-1.5f, 0.25f}}) {
              const int64_t pad = packed ? 0 : 1, batch = 3, lda = (ta ? s.M : s.K) + pad,
                            ldb = (tb ? s.K : s.N) + 2 * pad, ldc = s.N + pad;
              const int64_t sa = (ta ? s.K : s.M) * lda + 4 * pad,
                            sb = (tb ? s.N : s.K) * ldb + pad, sc = s.M * ldc + 2 * pad;
              auto A = random_vec(batch * sa, seed += 3), B = random_vec(batch * sb, seed + 1),
                   C = random_vec(batch * sc, seed + 2);
              if (beta == 0) C.assign(C.size(), std::numeric_limits<float>::quiet_NaN());
              auto Cr = cast_vec<double>(C);
              const auto Ad = cast_vec<double>(A), Bd = cast_vec<double>(B);
              kernels::gemm_batched(GemmArgs{ta, tb, s.M, s.N, s.K, alpha, A.data(), lda, B.data(),
                                             ldb, beta, C.data(), ldc, precision},
                                    batch, sa, sb, sc);
              for (int64_t b = 0; b < batch; ++b) {
                if (precision == kernels::Precision::BF16)
                  ref::gemm_bf16(ta, tb, s.M, s.N, s.K, alpha, A.data() + b * sa, lda,
                                 B.data() + b * sb, ldb, beta, Cr.data() + b * sc, ldc);
                else
                  ref::gemm<double>(ta, tb, s.M, s.N, s.K, alpha, Ad.data() + b * sa, lda,
                                    Bd.data() + b * sb, ldb, beta, Cr.data() + b * sc, ldc);
                for (int64_t i = 0; i < s.M; ++i)
                  for (int64_t j = 0; j < s.N; ++j)
                    ASSERT_NEAR(C[b * sc + i * ldc + j], Cr[b * sc + i * ldc + j],
                                1e-5 * (1 + std::sqrt(double(s.K))))
                        << "M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << ta
                        << " tb=" << tb << " alpha=" << alpha << " beta=" << beta << " item " << b
                        << " " << kernels::precision_name(precision)
                        << (packed ? " packed" : " padded");
              }
            }
}

// One product of a batch comes out bit for bit the same whatever else the batch holds, at a given
// thread count: every layout's optimizer (ZeRO owners orthogonalize their share of a shape group,
// batched) then steps exactly as one process. (Across thread counts oneDNN may split a product
// differently: the determinism contract holds a thread count fixed.)
TEST(Gemm, ABatchedProductDoesNotDependOnItsBatch) {
  const Case cases[] = {{9, 5, 6}, {64, 64, 64}, {32, 128, 32}, {1, 1, 1}};
  for (const auto precision : {kernels::Precision::F32, kernels::Precision::BF16})
    for (const Case& s : cases)
      for (const int threads : {1, 2}) {
        set_num_threads(threads);
        const int64_t most = 7;
        auto A = random_vec(most * s.M * s.K, 40), B = random_vec(most * s.K * s.N, 41);
        std::vector<float> first;
        for (const int64_t batch : {int64_t{1}, int64_t{3}, most}) {
          std::vector<float> C(static_cast<size_t>(batch * s.M * s.N));
          const int64_t skip = most - batch;  // the batch ends with the last product
          kernels::gemm_batched({.trans_b = true,
                                 .M = s.M,
                                 .N = s.N,
                                 .K = s.K,
                                 .A = A.data() + skip * s.M * s.K,
                                 .lda = s.K,
                                 .B = B.data() + skip * s.K * s.N,
                                 .ldb = s.K,
                                 .C = C.data(),
                                 .ldc = s.N,
                                 .precision = precision},
                                batch, s.M * s.K, s.K * s.N, s.M * s.N);
          const std::vector<float> last(C.end() - s.M * s.N, C.end());
          if (first.empty()) first = last;
          EXPECT_EQ(last, first) << "M=" << s.M << " N=" << s.N << " K=" << s.K << " batch "
                                 << batch << " on " << threads << " threads, "
                                 << kernels::precision_name(precision);
        }
      }
  set_num_threads();
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
}  // namespace k3::gemm_test
