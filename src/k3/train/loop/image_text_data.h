// data.source = "image_text": the built-in image-text corpus (data/image_text.h) as a run's data,
// for a model with a vision tower. Each batch takes the next train.batch_size samples of the
// corpus (seed data.seed), one a row, so where a run stands is the number of samples served
// (kept in checkpoints as the data cursor's position). Validation rows are samples from 2^40 on,
// which no run reaches in training.
#pragma once

#include <cstdint>

#include "k3/data/image_text.h"
#include "k3/model/model.h"
#include "k3/train/config/run_config.h"

namespace k3::train {

inline constexpr const char* kImageTextSource = "image_text";
inline bool image_text_source(const RunConfig& c) { return c.data.source == kImageTextSource; }

// How the model's config lays the corpus out: its image size, tokens per image and special tokens.
data::ImageTextFormat image_text_format(const model::ModelConfig& c);

// Refuses, naming data.source or data.documents, a run of the corpus without a vision tower or
// with packed documents.
void check_image_text(const RunConfig& config, const model::ModelConfig& model);

// `rows` rows of the corpus from sample `first`, and the model's view of them.
struct ImageTextBatch {
  data::ImageTextRows rows;
  model::TokenBatch view() const;
};
ImageTextBatch image_text_batch(const RunConfig& config, const model::ModelConfig& model,
                                int64_t first, int64_t rows);

// The validation split: this many batches of train.batch_size rows.
inline constexpr int64_t kImageTextValidationBatches = 8;
// The first sample of validation batch i.
int64_t image_text_validation_sample(const RunConfig& config, int64_t batch);

}  // namespace k3::train
