// Model shapes for a sweep: a preset scaled to a target size (docs/scaling.md, "Shapes").
//   Width: d a multiple of 8; every other width (MLP, experts, latent space, MLA ranks) scales by
//   d / d0, and so do the head counts (attention, KV, KDA; at least 1), head dims kept.
//   Depth: the preset's aspect ratio d0 / L0 kept, in whole repeats of its layer pattern (the
//   3:1 KDA:MLA period of K3): L = p · max(1, round(d / (p · d0 / L0))).
//   d: the width whose model's N (active matrix parameters) is nearest the target in log.
// Experts, top-k, shared experts, head dims, the vocabulary and everything else stay as in the
// preset.
#pragma once

#include <cstdint>

#include "k3/model/config.h"

namespace k3::sweep {

struct ModelShape {
  model::ModelConfig config;
  int64_t heads = 0, hidden = 0, layers = 0;
  int64_t params = 0;        // N: active matrix parameters (Model::matmul_params)
  int64_t params_total = 0;  // every parameter
  double flops_per_token(int64_t seq_len) const;  // Model::train_flops_per_token
};

// The preset at width HIDDEN (and the depth the rule gives).
ModelShape scale_preset(const model::ModelConfig& preset, int64_t hidden);
// The shape nearest TARGET active matrix parameters.
ModelShape shape_for_size(const model::ModelConfig& preset, double target);

// The length of the shortest repeating unit of the preset's layer kinds (4 for K3's 3:1 KDA:MLA
// interleave, 1 for attention in every layer).
int64_t layer_period(const model::ModelConfig& preset);

}  // namespace k3::sweep
