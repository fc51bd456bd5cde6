#include "k3/model/inventory.h"

#include <map>
#include <tuple>

namespace k3::model {
namespace {

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

int64_t layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::stoll(name.substr(prefix.size()));
}

std::string layer_component(const Model& m, const std::string& name) {
  if (has(name, "embed_tokens")) return "embedding";
  if (name.rfind("lm_head", 0) == 0) return "lm_head";
  if (has(name, "_res_")) return "attn_res";
  if (has(name, ".self_attn.")) return mixer_kind_name(m.layer_mixer(layer_of(name)));
  if (has(name, ".block_sparse_moe.experts.")) return "moe.routed_experts";
  if (has(name, ".block_sparse_moe.shared_experts.")) return "moe.shared_experts";
  if (has(name, ".block_sparse_moe.gate")) return "moe.router";
  if (has(name, ".block_sparse_moe.")) return "moe.latent";
  if (has(name, ".mlp.")) return "dense_mlp";
  return "norms";
}

// A multi-token prediction module's tensors (layers after the last) count as "mtp." and the
// component they are of in a layer, its copies of the embedding and the head included.
std::string component_of(const Model& m, const std::string& name) {
  if (layer_of(name) < m.config().num_hidden_layers) return layer_component(m, name);
  if (has(name, ".shared_head.head.")) return "mtp.lm_head";
  if (has(name, ".eh_proj.")) return "mtp.eh_proj";
  return "mtp." + layer_component(m, name);
}

// K3 keeps the KDA convolutions, decay parameters, output norm and the router bias in fp32.
std::string release_dtype(const std::string& name) {
  for (const char* part : {"conv1d", "A_log", "dt_bias", "o_norm", "e_score_correction_bias"})
    if (has(name, part)) return "fp32";
  return "bf16";
}

}  // namespace

std::vector<TensorEntry> tensor_inventory(const Model& model) {
  std::vector<TensorEntry> out;
  const ParamRegistry& p = model.params();
  for (int i = 0; i < p.size(); ++i) {
    const std::string& name = p.info(i).name;
    out.push_back({name, p.info(i).shape, release_dtype(name), component_of(model, name)});
  }
  return out;
}

std::vector<ComponentCount> parameter_counts(const Model& model) {
  const ModelConfig& c = model.config();
  std::map<std::string, ComponentCount> by;
  for (const TensorEntry& t : tensor_inventory(model)) {
    ComponentCount& cc = by[t.component];
    cc.component = t.component;
    const int64_t n = shape_numel(t.shape);
    cc.total += n;
    // A token passes through k of the E routed experts.
    cc.active += t.component.ends_with("moe.routed_experts")
                     ? n * c.num_experts_per_token / c.num_experts
                     : n;
  }
  std::vector<ComponentCount> out;
  ComponentCount total{"total", 0, 0};
  for (auto& [name, cc] : by) {
    out.push_back(cc);
    total.total += cc.total;
    total.active += cc.active;
  }
  out.push_back(total);
  return out;
}

std::vector<WeightProduct> weight_products(const Model& model) {
  std::map<std::tuple<int64_t, int64_t, bool, int, bool>, int64_t> by;
  const ParamRegistry& p = model.params();
  for (int i = 0; i < p.size(); ++i) {
    const ParamInfo& w = p.info(i);
    if (w.shape.size() != 2 || w.name.ends_with("embed_tokens.weight")) continue;
    const int tp_dim = w.shard.group == "tp" ? w.shard.dim : -1;
    const bool head = w.name.rfind("lm_head", 0) == 0 || has(w.name, ".shared_head.head.");
    ++by[{w.shape[0], w.shape[1], has(w.name, ".experts."), tp_dim, head}];
  }
  std::vector<WeightProduct> out;
  for (const auto& [key, count] : by)
    out.push_back({std::get<0>(key), std::get<1>(key), count, std::get<2>(key), std::get<3>(key),
                   std::get<4>(key)});
  return out;
}

int64_t Model::matmul_params() const {
  int64_t n = 0;
  for (int i = 0; i < params_.size(); ++i) {
    const ParamInfo& p = params_.info(i);
    if (p.shape.size() != 2 || p.name.ends_with("embed_tokens.weight")) continue;
    n += has(p.name, ".experts.") ? p.numel() * config_.num_experts_per_token / config_.num_experts
                                  : p.numel();
  }
  return n;
}

double mixing_flops_per_token(const ModelConfig& c, int64_t T) {
  double mixing = 0;
  for (int64_t l = 0; l < c.num_hidden_layers + c.num_nextn_predict_layers; ++l) {
    switch (mixer_kind(c, l)) {
      case MixerKind::GatedAttention:  // grouped heads share keys, not the products
        mixing += 3.0 * T * static_cast<double>(c.num_attention_heads) * 2.0 *
                  static_cast<double>(c.head_dim);
        break;
      case MixerKind::GatedMLA:
        mixing += 3.0 * T * static_cast<double>(c.num_attention_heads) *
                  static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim);
        break;
      case MixerKind::KDA:
        mixing += 12.0 * static_cast<double>(c.kda_num_heads) *
                  static_cast<double>(c.kda_head_dim * c.kda_head_dim);
        break;
    }
  }
  return mixing;
}

double Model::train_flops_per_token(int64_t T) const {
  return 6.0 * static_cast<double>(matmul_params()) + mixing_flops_per_token(config_, T);
}

}  // namespace k3::model
