#include "k3/kernels/reference.h"

#include <vector>

#include "k3/tensor/bf16.h"

namespace k3::ref {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const T a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const T b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      T& c = C[i * ldc + j];
      c = beta == T(0) ? alpha * acc : alpha * acc + beta * c;  // beta = 0 ignores C (even NaN)
    }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, double beta, double* C,
               int64_t ldc) {
  auto rounded = [](const float* x, int64_t rows, int64_t ld) {
    std::vector<double> r(static_cast<size_t>(rows * ld));
    for (size_t i = 0; i < r.size(); ++i) r[i] = bf16_to_float(float_to_bf16(x[i]));
    return r;
  };
  // A has rows of length lda: K rows when stored transposed, M otherwise; likewise B.
  const auto a = rounded(A, trans_a ? K : M, lda), b = rounded(B, trans_b ? N : K, ldb);
  gemm<double>(trans_a, trans_b, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}

}  // namespace k3::ref
