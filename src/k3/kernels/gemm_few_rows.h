// bf16 products of a few rows against a matrix stored [N, K]: C[M, N] = alpha · A[M, K] · Bᵀ +
// beta · C for M ≤ kFewRows, decoding's products (one row a sequence, x · Wᵀ with W [out, in]).
// oneDNN's bf16 matmul runs these well below the memory bandwidth, which is their ceiling: here
// each row of B is read once and dotted with every row of A, 32 bf16 pairs per vdpbf16ps into fp32
// accumulators.
#pragma once

#include <cstdint>

#include "k3/kernels/gemm.h"

namespace k3::kernels {

inline constexpr int64_t kFewRows = 8;

// Whether this build has the kernel (AVX512-BF16, -BW and -DQ compiled in).
bool few_rows_bf16_built();

// g's shape, alpha, beta and C (g.trans_a false, g.trans_b true, g.M ≤ kFewRows); A and B given in
// bf16 with g.lda and g.ldb.
void gemm_few_rows_bf16(const GemmArgs& g, const uint16_t* a, const uint16_t* b);

}  // namespace k3::kernels
