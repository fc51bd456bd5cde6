#include "k3/model/layer_factory.h"

#include <algorithm>

#include "k3/base/error.h"
#include "k3/model/layers/gated_attention.h"
#include "k3/model/layers/kda.h"
#include "k3/model/layers/latent_moe.h"
#include "k3/model/layers/mla.h"
#include "k3/model/layers/mlp.h"

namespace k3::model {

MixerKind mixer_kind(const ModelConfig& c, int64_t layer) {
  if (std::find(c.kda_layers.begin(), c.kda_layers.end(), layer + 1) != c.kda_layers.end())
    return MixerKind::KDA;
  return c.q_lora_rank > 0 ? MixerKind::GatedMLA : MixerKind::GatedAttention;
}

FfnKind ffn_kind(const ModelConfig& c, int64_t layer) {
  return c.num_experts > 0 && layer >= c.first_k_dense_replace ? FfnKind::LatentMoE
                                                               : FfnKind::DenseMlp;
}

const char* mixer_kind_name(MixerKind k) {
  switch (k) {
    case MixerKind::GatedAttention:
      return "attention";
    case MixerKind::GatedMLA:
      return "mla";
    case MixerKind::KDA:
      return "kda";
  }
  return "?";
}

void check_tensor_parallel(const ModelConfig& c, int tp) {
  if (tp == 1) return;
  bool attention = false, grouped = false, kda = false, mlp = false, moe = false;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    (mixer_kind(c, l) == MixerKind::KDA ? kda : attention) = true;
    grouped = grouped || mixer_kind(c, l) == MixerKind::GatedAttention;
    (ffn_kind(c, l) == FfnKind::LatentMoE ? moe : mlp) = true;
  }
  const struct {
    bool used;
    const char* field;
    int64_t value;
    const char* what;
  } splits[] = {{true, "vocab_size", c.vocab_size, "vocabulary rows"},
                {attention, "num_attention_heads", c.num_attention_heads, "heads"},
                {grouped, "num_key_value_heads", c.kv_heads(), "key-value heads"},
                {kda, "linear_attn_config.num_heads", c.kda_num_heads, "KDA heads"},
                {mlp, "intermediate_size", c.intermediate_size, "MLP features"},
                {moe, "moe_intermediate_size", c.moe_intermediate_size, "expert features"}};
  for (const auto& s : splits)
    K3_CHECK_CTX(!s.used || s.value % tp == 0, (ErrorContext{c.source, s.field, -1}), s.value, " ",
                 s.what, " do not split evenly over the tensor-parallel group of size ", tp);
}

std::unique_ptr<Mixer> make_mixer(ParamRegistry& reg, const std::string& prefix,
                                  const ModelConfig& c, int64_t layer) {
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
