// Plain reference versions of the MoE permutation kernels (moe_permute.h), for tests: the plan
// as "for each expert, every pair routed to it, in pair order", and the data movement as
// direct loops over rows (the backward gather written as the natural scatter-add).
#pragma once

#include <cstdint>

#include "k3/kernels/moe_permute.h"

namespace k3::ref {

void moe_permute_plan(const int32_t* ids, kernels::MoePermutePlan& plan);

template <typename T>
void moe_permute(const kernels::MoePermutePlan& plan, const T* x, int64_t dim, T* rows);
template <typename T>
void moe_permute_backward(const kernels::MoePermutePlan& plan, const T* drows, int64_t dim, T* dx);
template <typename T>
void moe_unpermute(const kernels::MoePermutePlan& plan, const T* rows, const T* weights,
                   int64_t dim, T* out);
template <typename T>
void moe_unpermute_backward(const kernels::MoePermutePlan& plan, const T* rows, const T* weights,
                            const T* dout, int64_t dim, T* drows, T* dweights);

}  // namespace k3::ref
