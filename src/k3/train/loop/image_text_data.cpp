#include "k3/train/loop/image_text_data.h"

#include "k3/base/error.h"

namespace k3::train {

data::ImageTextFormat image_text_format(const model::ModelConfig& c) {
  data::ImageTextFormat f;
  f.image_size = c.vt_image_size;
  f.image_tokens = c.image_tokens();
  f.placeholder = c.media_placeholder_token_id;
  f.eos = c.eos_token_id;
  f.pad = c.pad_token_id;
  f.ignore_index = c.ignore_index;
  return f;
}

void check_image_text(const RunConfig& config, const model::ModelConfig& model) {
  if (!image_text_source(config)) return;
  K3_CHECK_CTX(model.has_vision(), (ErrorContext{"", "data.source", -1}),
               "the image-text corpus needs a model with a vision tower; ", config.model.config,
               " has no vision_config with an image_size (configs/k3-nano-vision.json has one)");
  K3_CHECK_CTX(!config.data.documents, (ErrorContext{"", "data.documents", -1}),
               "the image-text corpus holds one sample a row, not packed documents: expected 0");
  K3_CHECK_CTX(model.eos_token_id >= 0 && model.pad_token_id >= 0,
               (ErrorContext{"", "data.source", -1}),
               "the image-text corpus ends captions with eos and pads rows: the model config needs "
               "eos_token_id and pad_token_id");
  K3_CHECK_CTX(config.data.seq_len > model.image_tokens(), (ErrorContext{"", "data.seq_len", -1}),
               "a row holds an image's ", model.image_tokens(),
               " placeholders and its caption: expected more than that, found ",
               config.data.seq_len);
}

model::TokenBatch ImageTextBatch::view() const {
  model::TokenBatch b{rows.tokens.data(), rows.targets.data(), rows.rows, rows.T};
  b.images = rows.images.data();
  b.num_images = rows.rows;
  return b;
}

ImageTextBatch image_text_batch(const RunConfig& config, const model::ModelConfig& model,
                                int64_t first, int64_t rows) {
  return {data::image_text_rows(static_cast<uint64_t>(config.data.seed), first, rows,
                                config.data.seq_len, image_text_format(model))};
}

int64_t image_text_validation_sample(const RunConfig& config, int64_t batch) {
  return (int64_t{1} << 40) + batch * config.train.batch_size;
}

}  // namespace k3::train
