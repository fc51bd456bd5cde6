#include "k3/train/loop/batches.h"

namespace k3::train {

BatchSource::BatchSource(const RunConfig& config, const model::ModelConfig& model,
                         const data::TokenDataset& dataset, int32_t eos)
    : config_(config), model_(model), eos_(eos) {
  if (!image_text_source(config))
    batcher_.emplace(dataset.train_tokens(), config.train.batch_size, config.data.seq_len,
                     static_cast<uint64_t>(config.data.seed));
}

std::vector<model::TokenBatch> BatchSource::next(int64_t first_row, int64_t rows) {
  const TrainSection& t = config_.train;
  std::vector<model::TokenBatch> views;
  if (batcher_) {
    micro_.resize(static_cast<size_t>(t.grad_accum));
    micro_docs_.resize(micro_.size());
    for (size_t m = 0; m < micro_.size(); ++m) {
      data::Batch& b = micro_[m];
      batcher_->next(b, first_row, rows);
      if (config_.data.documents) micro_docs_[m] = data::document_starts(b, eos_);
      views.push_back({b.inputs.data(), b.targets.data(), b.rows, b.seq_len, micro_docs_[m]});
    }
    return views;
  }
  micro_images_.clear();
  for (int64_t m = 0; m < t.grad_accum; ++m) {
    micro_images_.push_back(image_text_batch(config_, model_, samples_served_ + first_row, rows));
    samples_served_ += t.batch_size;
    views.push_back(micro_images_.back().view());
  }
  return views;
}

data::DataCursor BatchSource::cursor() const {
  return batcher_ ? batcher_->cursor() : data::DataCursor{0, samples_served_};
}

void BatchSource::seek(const data::DataCursor& cursor) {
  if (batcher_)
    batcher_->seek(cursor);
  else
    samples_served_ = cursor.position;
}

}  // namespace k3::train
