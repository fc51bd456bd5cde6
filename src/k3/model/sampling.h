// Choosing the next token from logits: temperature, top-k, top-p (nucleus). Draws come from
// Philox keyed by (seed, position), so a sample is reproducible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/base/arena.h"

namespace k3::model {

class Model;

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no top-k filter
  double top_p = 1.0;        // 1: no nucleus filter
  uint64_t seed = 0;
};

// Throws a k3::Error naming the parameter (field temperature, top_k or top_p) that is NaN,
// infinite or out of range.
void check_sampling_params(const SamplingParams& p);

// The most prompt tokens that fit before max_new generated ones in a context of `context`
// positions (a model's max_position_embeddings). Throws a k3::Error (field max_tokens) when
// max_new is below 1 or leaves no room for a one-token prompt.
int64_t prompt_room(int64_t max_new, int64_t context);

// Throws a k3::Error (field prompt, or max_tokens as prompt_room) when a prompt of prompt_len
// tokens followed by max_new generated ones does not fit a context of `context` positions.
void check_prompt_fits(int64_t prompt_len, int64_t max_new, int64_t context);

// Picks a token from finite logits using uniform draw u in [0, 1].
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, float u);

// Where a generation's time went: the prompts' prefill, and the decode steps after it (each
// feeding one token of every unfinished sequence). Under the profiler (k3/base/profile.h) the two
// are the buckets "prefill" and "decode", each holding its layers' buckets.
struct GenerationTimes {
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_tokens_per_second() const { return prefill_tokens / prefill_seconds; }
  double decode_tokens_per_second() const { return decode_tokens / decode_seconds; }
};

// Feeds the prompt, then samples up to max_new tokens (stopping after stop_token when >= 0).
// The parameters are checked, and the prompt and max_new must fit the model's context, before
// any work is done. The draw of token i comes from Philox counter i.
std::vector<int32_t> generate(Model& model, Arena& arena, const std::vector<int32_t>& prompt,
                              int64_t max_new, const SamplingParams& p, int32_t stop_token = -1,
                              GenerationTimes* times = nullptr);

// Continues several prompts (of any lengths) at once: one prefill of them all (Model::prefill),
// then every decode step feeds one token of each unfinished sequence through one batched decode.
// Sequence b's token i is drawn with Philox counter b·max_new + i, so the first sequence draws as
// generate() does (its logits computed in products of another height: equal to rounding).
std::vector<std::vector<int32_t>> generate_batch(Model& model, Arena& arena,
                                                 const std::vector<std::vector<int32_t>>& prompts,
                                                 int64_t max_new, const SamplingParams& p,
                                                 int32_t stop_token = -1,
                                                 GenerationTimes* times = nullptr);

}  // namespace k3::model
