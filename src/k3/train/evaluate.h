// Validation loss over the first `batches` batches of the validation split, in fixed order.
#pragma once

#include <cstdint>
#include <span>

#include "k3/train/session.h"

namespace k3::train {

struct EvalResult {
  double loss = NAN;        // mean nats per token
  double perplexity = NAN;  // exp(loss)
  int64_t tokens = 0;
};

// batches <= 0 evaluates the whole split.
EvalResult evaluate(Session& s, std::span<const int32_t> validation, int64_t batches);

// A sample continuing `prompt` (the tokenizer's bos when empty), decoded to text.
std::string sample_text(Session& s, const std::string& prompt, int64_t max_tokens, double temperature,
                        int64_t top_k, double top_p, uint64_t seed);

}  // namespace k3::train
