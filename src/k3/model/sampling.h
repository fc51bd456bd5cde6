// Choosing the next token from logits: temperature, top-k, top-p (nucleus). Draws come from
// Philox keyed by (seed, position), so a sample is reproducible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace k3 {

class Model;
class Arena;

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // 1: no nucleus filter
  uint64_t seed = 0;
};

// Picks a token from logits using uniform draw u in (0, 1).
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, float u);

// Feeds the prompt, then samples up to max_new tokens (stopping after stop_token when >= 0).
std::vector<int32_t> generate(Model& model, Arena& arena, const std::vector<int32_t>& prompt,
                              int64_t max_new, const SamplingParams& p, int32_t stop_token = -1);

}  // namespace k3
