// Products of a few rows against a matrix stored [N, K]: C[M, N] = alpha · A[M, K] · Bᵀ + beta · C
// for M ≤ kFewRows, decoding's products (one row a sequence, x · Wᵀ with W [out, in]), in fp32 and
// in bf16. Their ceiling is the memory bandwidth (B is read once, and at batch 1 it is all that is
// read), which oneDNN's bf16 matmul and fp32 sgemm run well below: here each row of B is read once,
// from start to end, and dotted with every row of A into fp32 accumulators (16 fp32 FMAs or 32
// bf16 pairs a vdpbf16ps an instruction), over as many threads as B has shares of 2 MiB.
#pragma once

#include <cstdint>

#include "k3/kernels/gemm.h"

namespace k3::kernels {

inline constexpr int64_t kFewRows = 8;

// Whether this build has the kernels (fp32: AVX-512 compiled in; bf16: also AVX512-BF16 and -BW).
bool few_rows_f32_built();
bool few_rows_bf16_built();

// g's shape, alpha, beta, A, B and C (g.trans_a false, g.trans_b true, g.M ≤ kFewRows).
void gemm_few_rows_f32(const GemmArgs& g);

// g's shape, alpha, beta and C (g.trans_a false, g.trans_b true, g.M ≤ kFewRows); A and B given in
// bf16 with g.lda and g.ldb.
void gemm_few_rows_bf16(const GemmArgs& g, const uint16_t* a, const uint16_t* b);

}  // namespace k3::kernels
