// Test inputs for bf16 products: values rounded to bf16, and copies nudged by about 2^-11 of
// themselves, up or down (a quarter of a bf16 step at most), so that rounding a nudged copy
// again gives back the bf16 value: a product that rounds its operands cannot tell them apart.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "k3/tensor/bf16.h"

namespace k3::testing {

inline void nudge(std::vector<float>& x, std::vector<float>& nudged, uint64_t seed) {
  std::mt19937_64 rng(seed);
  nudged.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = bf16_to_float(float_to_bf16(x[i]));
    nudged[i] = x[i] + std::ldexp(x[i], -11) * (rng() % 2 ? 1.0f : -1.0f);
  }
}

}  // namespace k3::testing
