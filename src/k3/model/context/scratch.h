// Scratch buffers of the context-parallel kernels, taken from the step arena: the arena's pages
// are faulted in once and reused, where a buffer from the heap of this size would be mapped and
// faulted in again on every call. Each function rewinds what it took (ArenaScope).
#pragma once

#include <algorithm>
#include <cstdint>

#include "k3/base/arena.h"

namespace k3::model {

inline float* scratch_floats(Arena& arena, int64_t n) {
  return arena.allocate_array<float>(static_cast<size_t>(n));
}
inline float* scratch_filled(Arena& arena, int64_t n, float value = 0.f) {
  float* p = scratch_floats(arena, n);
  std::fill_n(p, n, value);
  return p;
}

}  // namespace k3::model
