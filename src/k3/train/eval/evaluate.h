// Validation loss over the first `batches` batches of the validation split, in fixed order, and
// text sampled from the model.
#pragma once

#include <cstdint>
#include <span>

#include "k3/data/dataset.h"
#include "k3/model/sampling.h"
#include "k3/train/session.h"

namespace k3::train {

struct EvalResult {
  double loss = NAN;        // mean nats per token
  double perplexity = NAN;  // exp(loss)
  int64_t tokens = 0;
};

// batches <= 0 evaluates the whole split.
EvalResult evaluate(Session& s, const data::TokenView& validation, int64_t batches);
// The run's own validation: the dataset's split, or for the image-text corpus its validation
// batches (train/image_text_data.h).
EvalResult evaluate_run(Session& s, const data::TokenDataset& dataset, int64_t batches);

// The token ids a sample continues: PROMPT encoded, or the tokenizer's eos when it is empty.
std::vector<int32_t> prompt_ids(const Session& s, const std::string& prompt);

struct Sample {
  std::string text;              // the prompt and its continuation
  int64_t prompt_tokens = 0;     // the prompt's length in tokens
  int64_t dropped_tokens = 0;    // leading prompt tokens the model did not see (truncate_prompt)
  model::GenerationTimes times;  // the prefill's and the decode steps'
};

// A sample of up to max_tokens tokens continuing PROMPT. A prompt too long for the model's context
// (with max_tokens new tokens) is refused, or with truncate_prompt cut to its last tokens that fit.
Sample sample_text(Session& s, const std::string& prompt, int64_t max_tokens,
                   const model::SamplingParams& p, bool truncate_prompt = false);

}  // namespace k3::train
