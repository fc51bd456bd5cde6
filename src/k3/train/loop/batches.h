// Where each step's micro-batches come from: windows of the run's token streams (data::Batcher,
// with their document starts under data.documents), or samples of the built-in image-text corpus
// (image_text_data.h), counted so that a checkpoint's data cursor says where the run stands.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "k3/data/batcher.h"
#include "k3/data/dataset.h"
#include "k3/model/model.h"
#include "k3/train/config/run_config.h"
#include "k3/train/loop/image_text_data.h"

namespace k3::train {

class BatchSource {
 public:
  // DATASET (text) must outlive the source; the image-text corpus draws from the configuration.
  // EOS marks where packed documents start.
  BatchSource(const RunConfig& config, const model::ModelConfig& model,
              const data::TokenDataset& dataset, int32_t eos);

  // The rows [first_row, first_row + rows) of each of the next global batch's micro-batches (a
  // rank's share); views valid until the next call.
  std::vector<model::TokenBatch> next(int64_t first_row, int64_t rows);

  data::DataCursor cursor() const;
  void seek(const data::DataCursor& cursor);

 private:
  const RunConfig& config_;
  const model::ModelConfig& model_;
  int32_t eos_;
  std::optional<data::Batcher> batcher_;  // text data; the image-text corpus counts samples
  int64_t samples_served_ = 0;            // of the image-text corpus
  std::vector<data::Batch> micro_;
  std::vector<std::vector<int64_t>> micro_docs_;  // their documents, under data.documents
  std::vector<ImageTextBatch> micro_images_;      // under the image-text corpus
};

}  // namespace k3::train
