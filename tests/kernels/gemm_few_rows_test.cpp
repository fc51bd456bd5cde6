#include "k3/kernels/gemm_few_rows.h"

#include <cmath>
#include <limits>

#include "common/test_util.h"
#include "k3/base/threads.h"
#include "k3/kernels/reference.h"
#include "k3/tensor/bf16.h"

namespace k3::gemm_few_rows_test {
namespace {

using kernels::GemmArgs;
using testing::cast_vec;
using testing::random_vec;

enum class Kind { F32, Bf16 };

struct Shape {
  int64_t M, N, K;
};

// The error of fp32 accumulation over K terms of magnitude < 1, relative to √K. Measured: the
// largest over both kinds, 40 seeds, M 1, 3 and 8, N 5 and 67, K from 1 to 3000, alpha -0.75 and
// beta 0.5, on 1 and 3 threads, was 3.4e-7 · √K; the tolerance is 3 times that.
constexpr double kTolerancePerRootK = 1e-6;

// C = alpha · A · Bᵀ + beta · C from the kernel (its A and B rounded to bf16 first for Bf16), with
// padded leading dimensions.
std::vector<float> run(Kind kind, const Shape& s, float alpha, float beta, uint64_t seed) {
  const int64_t lda = s.K + 3, ldb = s.K + 5, ldc = s.N + 2;
  const auto A = random_vec(s.M * lda, seed), B = random_vec(s.N * ldb, seed + 1);
  auto C = random_vec(s.M * ldc, seed + 2);
  if (beta == 0) C.assign(C.size(), std::numeric_limits<float>::quiet_NaN());  // must be ignored
  const GemmArgs g{false, true,     s.M, s.N,  s.K,      alpha, A.data(),
                   lda,   B.data(), ldb, beta, C.data(), ldc};
  if (kind == Kind::F32) {
    kernels::gemm_few_rows_f32(g);
  } else {
    std::vector<uint16_t> Ab(A.size()), Bb(B.size());
    float_to_bf16(A.data(), Ab.data(), static_cast<int64_t>(A.size()));
    float_to_bf16(B.data(), Bb.data(), static_cast<int64_t>(B.size()));
    kernels::gemm_few_rows_bf16(g, Ab.data(), Bb.data());
  }
  return C;
}

// The kernel against the double reference (for Bf16, of the operands rounded to bf16): every
// output within fp32 accumulation's error; the padding columns of C left as they were.
void check(Kind kind, const Shape& s, float alpha, float beta, uint64_t seed) {
  const int64_t lda = s.K + 3, ldb = s.K + 5, ldc = s.N + 2;
  const auto A = random_vec(s.M * lda, seed), B = random_vec(s.N * ldb, seed + 1),
             C0 = random_vec(s.M * ldc, seed + 2);
  auto Cr = cast_vec<double>(C0);
  if (kind == Kind::F32)
    ref::gemm<double>(false, true, s.M, s.N, s.K, alpha, cast_vec<double>(A).data(), lda,
                      cast_vec<double>(B).data(), ldb, beta, Cr.data(), ldc);
  else
    ref::gemm_bf16(false, true, s.M, s.N, s.K, alpha, A.data(), lda, B.data(), ldb, beta, Cr.data(),
                   ldc);
  const std::vector<float> C = run(kind, s, alpha, beta, seed);
  const double tolerance = kTolerancePerRootK * std::sqrt(double(s.K));
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const auto where = ::testing::Message()
                         << (kind == Kind::F32 ? "f32" : "bf16") << " M=" << s.M << " N=" << s.N
                         << " K=" << s.K << " alpha=" << alpha << " beta=" << beta << " i=" << i
                         << " j=" << j;
      if (j < s.N)
        ASSERT_NEAR(C[i * ldc + j], Cr[i * ldc + j], tolerance) << where;
      else if (beta != 0)
        ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]) << where;
      else
        ASSERT_TRUE(std::isnan(C[i * ldc + j])) << where;
    }
}

// Every row count; B's rows in blocks of 4 and the 1-3 left over; reductions of one element, of
// less than, exactly and just past a chunk (fp32: 16, bf16: 32), and long ones with a partial
// last chunk; alpha and beta (beta = 0: C's NaNs ignored).
TEST(GemmFewRows, MatchesReferenceAtEdgeShapes) {
  uint64_t seed = 1;
  for (const Kind kind : {Kind::F32, Kind::Bf16}) {
    if (kind == Kind::F32 ? !kernels::few_rows_f32_built() : !kernels::few_rows_bf16_built())
      continue;
    for (int64_t M = 1; M <= kernels::kFewRows; ++M)
      for (const int64_t N : {1, 3, 4, 5, 17, 67})
        for (const int64_t K : {1, 15, 16, 17, 31, 32, 33, 100, 515}) {
          check(kind, {M, N, K}, 1.0f, 0.0f, seed += 3);
          check(kind, {M, N, K}, -0.75f, 0.5f, seed += 3);
        }
  }
}

// A B of over 2 MiB a thread's share is split over the threads: 3 shares of unequal numbers of
// blocks of 4 rows, and the rows past the last block.
TEST(GemmFewRows, MatchesReferenceOverThreads) {
  const int threads = num_threads();
  set_num_threads(3);
  uint64_t seed = 500;
  for (const Kind kind : {Kind::F32, Kind::Bf16}) {
    if (kind == Kind::F32 ? !kernels::few_rows_f32_built() : !kernels::few_rows_bf16_built())
      continue;
    const int64_t N = kind == Kind::F32 ? 1603 : 3203;  // 6.4 MB of B either way
    for (const int64_t M : {1, 5, 8}) check(kind, {M, N, 1000}, 1.5f, 1.0f, seed += 3);
  }
  set_num_threads(threads);
}

// Each output is one thread's sum in a fixed order: the same bits on any number of threads.
TEST(GemmFewRows, BitsDoNotDependOnThreads) {
  const int threads = num_threads();
  for (const Kind kind : {Kind::F32, Kind::Bf16}) {
    if (kind == Kind::F32 ? !kernels::few_rows_f32_built() : !kernels::few_rows_bf16_built())
      continue;
    const Shape s{3, kind == Kind::F32 ? 1603 : 3203, 1000};
    set_num_threads(1);
    const std::vector<float> one = run(kind, s, 1.0f, 0.5f, 700);
    set_num_threads(3);
    EXPECT_EQ(run(kind, s, 1.0f, 0.5f, 700), one);
  }
  set_num_threads(threads);
}

}  // namespace
}  // namespace k3::gemm_few_rows_test
