// Which layer fills each slot of decoder layer l, decided by the configuration alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "k3/model/config.h"
#include "k3/model/layers/mixer.h"

namespace k3::model {

class LatentMoE;

enum class MixerKind { GatedAttention, GatedMLA, KDA };
enum class FfnKind { DenseMlp, LatentMoE };

MixerKind mixer_kind(const ModelConfig& c, int64_t layer);  // 0-based layer
FfnKind ffn_kind(const ModelConfig& c, int64_t layer);
const char* mixer_kind_name(MixerKind k);

// Tensor parallelism splits heads (and the plain attention's key-value heads), KDA heads, the
// vocabulary and the MLP and expert intermediate sizes evenly over tp: throws a k3::Error naming
// the first field of c (among the layers c has) that does not divide by tp.
void check_tensor_parallel(const ModelConfig& c, int tp);

// `prefix` is the layer's, e.g. "model.layers.3".
std::unique_ptr<Mixer> make_mixer(ParamRegistry& reg, const std::string& prefix,
                                  const ModelConfig& c, int64_t layer);
// The feed-forward block, and the same object as a LatentMoE when it is one (the model keeps its
// MoE layers apart for expert balancing).
struct FfnBlock {
  std::unique_ptr<FeedForward> ffn;
  LatentMoE* moe = nullptr;
};
FfnBlock make_ffn(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c,
                  int64_t layer);

}  // namespace k3::model
