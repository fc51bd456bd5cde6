// Philox-4x32-10, a counter-based RNG: any element of any tensor can be drawn on its own.
// A value is keyed by (seed, stream, index): the seed is the run's, the stream names the tensor
// (stream_of("model.layers.3.mlp.up_proj.weight")), the index is the global element index.
// Every parallel layout therefore draws bit-identical global weights.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace k3 {

using Philox4 = std::array<uint32_t, 4>;

// One Philox-4x32-10 block: 128 random bits for a 128-bit counter and a 64-bit key.
Philox4 philox4x32(Philox4 counter, uint64_t key);

// A stable 64-bit stream id for a name (FNV-1a).
uint64_t stream_of(std::string_view name);

// Uniform in the open interval (0, 1), 24 bits of randomness.
float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal (Box-Muller on two independent 32-bit words).
float philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

// Fill out[i] = draw(seed, stream, first + i) for i < n, in parallel.
void fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first, float lo,
                  float hi);
void fill_normal(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first, float mean,
                 float std);

}  // namespace k3
