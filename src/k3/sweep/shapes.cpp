#include "k3/sweep/shapes.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"
#include "k3/model/inventory.h"
#include "k3/model/model.h"

namespace k3::sweep {
namespace {

// 1-based layer i is KDA in the preset.
bool is_kda(const model::ModelConfig& c, int64_t i) {
  return std::find(c.kda_layers.begin(), c.kda_layers.end(), i) != c.kda_layers.end();
}

int64_t scaled(int64_t width, int64_t hidden, int64_t preset_hidden) {
  if (width == 0) return 0;
  return std::max<int64_t>(1, std::llround(static_cast<double>(width) * hidden / preset_hidden));
}

}  // namespace

int64_t layer_period(const model::ModelConfig& c) {
  const int64_t L = c.num_hidden_layers;
  for (int64_t p = 1; p < L; ++p) {
    if (L % p != 0) continue;
    bool repeats = true;
    for (int64_t i = p + 1; i <= L && repeats; ++i) repeats = is_kda(c, i) == is_kda(c, i - p);
    if (repeats) return p;
  }
  return L;
}

ModelShape scale_preset(const model::ModelConfig& preset, int64_t hidden) {
  K3_CHECK(hidden > 0, "a model needs a positive width, got ", hidden);
  const int64_t d0 = preset.hidden_size;
  model::ModelConfig c = preset;
  c.hidden_size = hidden;
  for (int64_t* w : {&c.intermediate_size, &c.moe_intermediate_size, &c.routed_expert_hidden_size,
                     &c.q_lora_rank, &c.kv_lora_rank, &c.num_attention_heads, &c.kda_num_heads})
    *w = scaled(*w, hidden, d0);
  // Grouped heads keep their group where the scaled heads allow it, else each head its own keys
  // and values (MLA's and K3's always).
  const int64_t group = preset.num_attention_heads / preset.kv_heads();
  c.num_key_value_heads =
      c.num_attention_heads % group == 0 ? c.num_attention_heads / group : c.num_attention_heads;

  const int64_t p = layer_period(preset);
  const double aspect = static_cast<double>(preset.hidden_size) / preset.num_hidden_layers;
  const int64_t repeats =
      std::max<int64_t>(1, std::llround(static_cast<double>(c.hidden_size) / (p * aspect)));
  c.num_hidden_layers = p * repeats;
  c.kda_layers.clear();
  c.full_attn_layers.clear();
  if (!preset.kda_layers.empty()) {
    for (int64_t i = 1; i <= c.num_hidden_layers; ++i)
      (is_kda(preset, (i - 1) % p + 1) ? c.kda_layers : c.full_attn_layers).push_back(i);
  }
  c.first_k_dense_replace = std::min(c.first_k_dense_replace, c.num_hidden_layers);

  const model::Model m(c, /*allocate=*/false);
  ModelShape s;
  s.config = c;
  s.heads = c.num_attention_heads;
  s.hidden = c.hidden_size;
  s.layers = c.num_hidden_layers;
  s.params = m.matmul_params();
  s.params_total = model::parameter_counts(m).back().total;
  return s;
}

double ModelShape::flops_per_token(int64_t seq_len) const {
  return model::Model(config, /*allocate=*/false).train_flops_per_token(seq_len);
}

ModelShape shape_for_size(const model::ModelConfig& preset, double target) {
  K3_CHECK(target > 0, "a target size must be positive, got ", target);
  constexpr int64_t kStep = 8;
  ModelShape best = scale_preset(preset, kStep);
  auto distance = [target](const ModelShape& s) { return std::abs(std::log(s.params / target)); };
  for (int64_t d = 2 * kStep; d <= 65536; d += kStep) {
    ModelShape s = scale_preset(preset, d);
    const bool past = s.params > 4 * target;
    if (distance(s) < distance(best)) best = std::move(s);
    if (past) break;
  }
  return best;
}

}  // namespace k3::sweep
