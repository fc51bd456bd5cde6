#include "k3/kernels/gemm.h"

#include <omp.h>

#include <dnnl.h>

#include "k3/base/error.h"

namespace k3::kernels {

static void check_args(const GemmArgs& g) {
  K3_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0, "gemm: negative size M=", g.M, " N=", g.N, " K=", g.K);
  K3_CHECK(g.lda >= (g.trans_a ? g.M : g.K) && g.ldb >= (g.trans_b ? g.K : g.N) && g.ldc >= g.N,
           "gemm: leading dimension too small (lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc,
           ") for M=", g.M, " N=", g.N, " K=", g.K);
}

// oneDNN runs multi-threaded when called from serial code and single-threaded inside an OpenMP
// parallel region (the threading policy in base/threads.h).
static void run_one(const GemmArgs& g) {
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {  // C = beta * C
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) g.C[i * g.ldc + j] = g.beta == 0 ? 0 : g.beta * g.C[i * g.ldc + j];
    return;
  }
  dnnl_status_t st = dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.M, g.N, g.K, g.alpha,
                                g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc);
  K3_CHECK(st == dnnl_success, "gemm: oneDNN sgemm failed with status ", static_cast<int>(st));
}

void gemm(const GemmArgs& g) {
  check_args(g);
  run_one(g);
}

void gemm_batched(const GemmArgs& g, int64_t batch, int64_t stride_a, int64_t stride_b,
                  int64_t stride_c) {
  check_args(g);
  auto item = [&](int64_t i) {
    GemmArgs gi = g;
    gi.A = g.A + i * stride_a;
    gi.B = g.B + i * stride_b;
    gi.C = g.C + i * stride_c;
    run_one(gi);
  };
  // Many small products: one per thread. Few large ones: each uses every thread.
  const double flops = 2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  if (batch >= omp_get_max_threads() && flops < 64e6 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < batch; ++i) item(i);
  } else {
    for (int64_t i = 0; i < batch; ++i) item(i);
  }
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C) {
  gemm(GemmArgs{trans_a, trans_b, M, N, K, alpha, A, trans_a ? M : K, B, trans_b ? K : N, beta, C, N});
}

}  // namespace k3::kernels
