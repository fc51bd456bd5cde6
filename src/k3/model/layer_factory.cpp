#include "k3/model/layer_factory.h"

#include <algorithm>

#include "k3/model/layers/gated_attention.h"
#include "k3/model/layers/kda.h"
#include "k3/model/layers/latent_moe.h"
#include "k3/model/layers/mla.h"
#include "k3/model/layers/mlp.h"

namespace k3::model {

MixerKind mixer_kind(const ModelConfig& c, int64_t layer) {
  if (std::find(c.kda_layers.begin(), c.kda_layers.end(), layer + 1) != c.kda_layers.end()) return MixerKind::KDA;
  return c.q_lora_rank > 0 ? MixerKind::GatedMLA : MixerKind::GatedAttention;
}

FfnKind ffn_kind(const ModelConfig& c, int64_t layer) {
  return c.num_experts > 0 && layer >= c.first_k_dense_replace ? FfnKind::LatentMoE : FfnKind::DenseMlp;
}

const char* mixer_kind_name(MixerKind k) {
  switch (k) {
    case MixerKind::GatedAttention: return "attention";
    case MixerKind::GatedMLA: return "mla";
    case MixerKind::KDA: return "kda";
  }
  return "?";
}

std::unique_ptr<Mixer> make_mixer(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c,
                                  int64_t layer) {
  switch (mixer_kind(c, layer)) {
    case MixerKind::KDA:
      return std::make_unique<KimiDeltaAttention>(reg, prefix + ".self_attn", c);
    case MixerKind::GatedMLA:
      return std::make_unique<GatedMLA>(reg, prefix + ".self_attn", c);
    case MixerKind::GatedAttention:
    default:
      return std::make_unique<GatedAttention>(reg, prefix + ".self_attn", c);
  }
}

FfnBlock make_ffn(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c,
                  int64_t layer) {
  switch (ffn_kind(c, layer)) {
    case FfnKind::LatentMoE: {
      auto moe = std::make_unique<LatentMoE>(reg, prefix + ".block_sparse_moe", c);
      LatentMoE* raw = moe.get();
      return {std::move(moe), raw};
    }
    case FfnKind::DenseMlp:
    default:
      return {std::make_unique<GluMlp>(reg, prefix + ".mlp", c, c.intermediate_size)};
  }
}

}  // namespace k3::model
