// Model, its vision half: the images' tokens in place of the media placeholders (the tower's
// forward, or its tokens computed ahead by a pipeline filler), and their gradient back to the
// tower.
#include <cstring>
#include <vector>

#include "k3/base/error.h"
#include "k3/model/model.h"

namespace k3::model {

std::vector<int64_t> Model::placeholders(const TokenBatch& b) const {
  const int64_t n = b.B * b.T, per_image = vision_ ? vision_->tokens_per_image() : 0;
  std::vector<int64_t> at;
  if (vision_)
    for (int64_t i = 0; i < n; ++i)
      if (b.tokens[i] == config_.media_placeholder_token_id) at.push_back(i);
  K3_CHECK(vision_ || b.num_images == 0, "a batch with ", b.num_images,
           " images, but this model has no vision tower");
  K3_CHECK(static_cast<int64_t>(at.size()) == b.num_images * per_image, "the batch holds ",
           at.size(), " media placeholder tokens (", config_.media_placeholder_token_id, ") for ",
           b.num_images, " images of ", per_image, " tokens each");
  K3_CHECK(b.num_images == 0 || b.images, "a batch of ", b.num_images, " images without pixels");
  return at;
}

const float* Model::tower_tokens(const Step& s, const TokenBatch& b) const {
  float* tokens = s.alloc(b.num_images * vision_->tokens_per_image() * config_.hidden_size);
  vision_->forward(s, b.images, b.num_images, tokens);
  return tokens;
}

const float* Model::encode_images(const MicroBatch& mb, const TokenBatch& b) {
  K3_CHECK(vision_, "encode_images: this model has no vision tower");
  return tower_tokens(step(mb, true), b);
}

void Model::place_images(const Step& s, const TokenBatch& b, const float* ahead, float* x) const {
  const std::vector<int64_t> at = placeholders(b);
  if (at.empty()) return;
  const int64_t d = config_.hidden_size;
  const float* tokens = ahead ? ahead : tower_tokens(s, b);
  for (size_t j = 0; j < at.size(); ++j)
    std::memcpy(x + at[j] * d, tokens + static_cast<int64_t>(j) * d,
                static_cast<size_t>(d) * sizeof(float));
}

void Model::images_backward(const Step& s, const TokenBatch& b, float* dx) const {
  const std::vector<int64_t> at = placeholders(b);
  if (at.empty()) return;
  const int64_t d = config_.hidden_size;
  float* d_tokens = s.alloc(static_cast<int64_t>(at.size()) * d);
  for (size_t j = 0; j < at.size(); ++j) {
    std::memcpy(d_tokens + static_cast<int64_t>(j) * d, dx + at[j] * d,
                static_cast<size_t>(d) * sizeof(float));
    std::memset(dx + at[j] * d, 0, static_cast<size_t>(d) * sizeof(float));
  }
  vision_->backward(s, b.images, b.num_images, d_tokens);
}

}  // namespace k3::model
