// MoE token permutation: the (token, slot) pairs of a routing decision sorted by expert, so each
// expert's inputs are one contiguous block of rows and its compute is one GEMM.
//
// A routing of T tokens to k experts each is ids [T, k]; pair p = t·k + j is slot j of token t.
// The plan is a stable counting sort of the pairs by expert id: expert e owns the rows
// [offsets[e], offsets[e+1]), and within an expert the pairs keep their order (token, then slot).
// Every kernel below writes each output element from one place, in a fixed order: results do
// not depend on the thread count, and there are no atomics.
#pragma once

#include <cstdint>

namespace k3::kernels {

struct MoePermutePlan {
  int64_t tokens = 0, k = 0, experts = 0;
  int64_t* offsets = nullptr;      // [experts + 1]
  int64_t* pair_of_row = nullptr;  // [tokens·k]: which pair sits in each permuted row
  int64_t* row_of_pair = nullptr;  // [tokens·k]: the inverse
  int64_t rows(int64_t e) const { return offsets[e + 1] - offsets[e]; }
};

// Fills plan's arrays (allocated by the caller) from ids [tokens, k], each in [0, experts).
// Throws k3::Error on an id out of range.
void moe_permute_plan(const int32_t* ids, MoePermutePlan& plan);

// Forward gather: rows[r] = x[token of pair_of_row[r]], x [tokens, dim], rows [tokens·k, dim].
void moe_permute(const MoePermutePlan& plan, const float* x, int64_t dim, float* rows);
// Its backward, a scatter-add: dx[t] = Σ_j drows[row_of_pair[t·k + j]], summed over j in order.
void moe_permute_backward(const MoePermutePlan& plan, const float* drows, int64_t dim, float* dx);

// Combine: out[t] = Σ_j weights[t·k + j] · rows[row_of_pair[t·k + j]], out [tokens, dim].
void moe_unpermute(const MoePermutePlan& plan, const float* rows, const float* weights, int64_t dim,
                   float* out);
// Its backward: drows[row(t, j)] = weights[t·k + j] · dout[t] and
// dweights[t·k + j] = <dout[t], rows[row(t, j)]> (both written, not accumulated).
void moe_unpermute_backward(const MoePermutePlan& plan, const float* rows, const float* weights,
                            const float* dout, int64_t dim, float* drows, float* dweights);

}  // namespace k3::kernels
