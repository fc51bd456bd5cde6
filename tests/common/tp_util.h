// Comparing a tensor-parallel registry with the unsplit one: each rank's shard is the slice of
// the unsplit tensor the registry says it holds, and gradients the registry marks as summed over
// tp are compared after summing them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/model/params.h"

namespace k3::testing {

// The part of a global tensor `p` lays out on this rank (all of it when replicated).
inline std::vector<float> shard_of(const model::ParamInfo& p, const float* global) {
  if (!p.held()) return {};  // another ep rank's expert
  if (!p.shard.split()) return std::vector<float>(global, global + p.numel());
  const size_t dim = static_cast<size_t>(p.shard.dim);
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < p.shape.size(); ++k)
    if (k < dim)
      outer *= p.shape[k];
    else if (k > dim)
      inner *= p.shape[k];
  const int64_t run = p.local_shape[dim] * inner;
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o) {
    const float* at = global + (o * p.shape[dim] + p.shard_start) * inner;
    out.insert(out.end(), at, at + run);
  }
  return out;
}

// max |a − b| / max |b| (the absolute difference when b is all zero).
inline double max_rel_error(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Every gradient of `split` (this rank's registry) against the same parameter's gradient in
// `whole` (the unsplit one), summed over tp where the registry says so; returns the worst error.
inline double compare_grads(const model::ParamRegistry& split, const model::ParamRegistry& whole,
                            const dist::Comm& tp, double tolerance) {
  double worst = 0;
  for (int i = 0; i < split.size(); ++i) {
    const model::ParamInfo& p = split.info(i);
    const int w = whole.find(p.name);
    EXPECT_GE(w, 0) << p.name;
    if (w < 0) continue;
    std::vector<float> got(split.grad(i).f32(), split.grad(i).f32() + p.local_numel());
    if (p.shard.grad_summed_over("tp")) tp.all_reduce(got.data(), p.local_numel());
    const std::vector<float> want = shard_of(p, whole.grad(w).f32());
    const double e = max_rel_error(got.data(), want.data(), p.local_numel());
    EXPECT_LT(e, tolerance) << p.name;
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace k3::testing
