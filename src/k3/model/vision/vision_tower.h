// The vision tower and its projector (K3's vision_tower.* and mm_projector.*, docs/vision.md):
// images of [3, S, S] floats become tokens of the language model's width, one per 2×2 block of
// patches, that take the place of the media placeholder tokens in the text.
//   patch_embed   each p×p patch (channel, row, column flattened) times proj [D, 3, p, p], plus
//                 its position's pos_emb [g, g, D] (g = S / p patches a side)
//   blocks        x += wo(attention(wqkv(norm0(x)))), every patch of an image seeing every other;
//                 x += fc1(gelu_tanh(fc0(norm1(x))))
//   final_layernorm, then each 2×2 block of patches concatenated, [4D], blocks in row-major order
//   mm_projector  post_norm(proj.2(gelu(proj.0(merged))))
// Every image runs alone (its own attention); the tower holds no state between images.
#pragma once

#include <cstdint>
#include <vector>

#include "k3/model/config.h"
#include "k3/model/layers/linear.h"
#include "k3/model/layers/norm.h"
#include "k3/model/step.h"

namespace k3::model {

class VisionTower {
 public:
  VisionTower() = default;
  VisionTower(ParamRegistry& reg, const ModelConfig& c);

  int64_t image_floats() const { return 3 * size_ * size_; }
  int64_t tokens_per_image() const { return grid_ * grid_ / 4; }
  int64_t width() const { return hidden_; }  // of the tokens it writes
  // Parameter indices [first, end) (registry order).
  int params_first() const { return patch_w_; }
  int params_end() const { return params_end_; }

  // images [n, 3, S, S] → out [n · tokens_per_image, width]. Saves what the backward reads.
  void forward(const Step& s, const float* images, int64_t n, float* out) const;
  // d_out [n · tokens_per_image, width], for the same images: parameter gradients accumulate.
  void backward(const Step& s, const float* images, int64_t n, const float* d_out) const;

 private:
  struct Block {
    std::string name;
    RMSNorm norm0, norm1;
    Linear wqkv, wo, fc0, fc1;
  };
  void patches(const float* images, int64_t n, float* out) const;  // [n·g², 3p²]
  void block_forward(const Step& s, const Block& b, const float* x, int64_t n, float* y) const;
  void block_backward(const Step& s, const Block& b, int64_t n, const float* dy, float* dx) const;

  int64_t size_ = 0, patch_ = 0, grid_ = 0, dim_ = 0, heads_ = 0, qkv_ = 0, hidden_ = 0;
  int patch_w_ = -1, pos_w_ = -1, params_end_ = -1;
  std::vector<Block> blocks_;
  RMSNorm final_norm_, post_norm_;
  Linear proj0_, proj2_;
};

}  // namespace k3::model
