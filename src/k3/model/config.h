// The model configuration, read from HF-style JSON (a flat object, or K3's nesting under
// "text_config"). Field names are Hugging Face's / Kimi K3's; fields of nested objects are named
// with dots ("linear_attn_config.head_dim"). Validation names the field at fault. A config whose
// `architectures` or `model_type` names Llama (LlamaForCausalLM, "llama") or DeepSeek-V3
// (DeepseekV3ForCausalLM, "deepseek_v3") is read with that family's field names and meanings as
// published (docs/families.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace k3::model {

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t head_dim = 0;  // 0 in the file means hidden_size / num_attention_heads
  int64_t intermediate_size = 0;
  std::string hidden_act = "situ";  // "situ" or "silu"
  double activation_situ_beta = 4.0;
  double activation_situ_linear_beta = 25.0;
  double rms_norm_eps = 1e-5;
  double initializer_range = 0.02;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 4096;
  int32_t bos_token_id = -1, eos_token_id = -1, pad_token_id = -1;
  int32_t ignore_index = -100;

  // Gated MLA (math §4); q_lora_rank == 0 means the plain gated multi-head attention.
  int64_t q_lora_rank = 0, kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  // Grouped-query attention (the plain attention only): heads share keys and values in groups of
  // num_attention_heads / num_key_value_heads; 0 (in the file, or a config built in code) means
  // num_attention_heads: kv_heads().
  int64_t num_key_value_heads = 0;
  // K3's attention is NoPE with a sigmoid output gate, in both attention layers (the names are
  // K3's). Without NoPE, rotary position embeddings (math §4.1) turn each head of q and k (MLA:
  // q_r and the shared k_r) by the token's position in its sequence or packed document.
  bool mla_use_nope = true, mla_use_output_gate = true;
  double rope_theta = 10000;
  // rope_scaling: "" (none, also "default"), "llama3" (its frequencies are scaled) or "yarn"
  // (read for the planner; training refuses it).
  std::string rope_scaling_type;
  double rope_scaling_factor = 0, rope_low_freq_factor = 0, rope_high_freq_factor = 0;
  int64_t rope_original_max_position_embeddings = 0;

  // Stable LatentMoE (math §5); num_experts == 0 means a dense MLP in every layer.
  int64_t num_experts = 0, num_experts_per_token = 0;
  int64_t moe_intermediate_size = 0;      // F: each expert's width
  int64_t routed_expert_hidden_size = 0;  // L: the latent space
  int64_t num_shared_experts = 0;
  int64_t first_k_dense_replace = 0;      // layers before this one use the dense MLP
  double routed_scaling_factor = 1.0;
  // DeepSeek-V3's group-limited routing: the experts in n_group groups, a token's k chosen within
  // its topk_group best groups. Counted by the planner; training refuses n_group > 1.
  int64_t n_group = 1, topk_group = 1;
  // DeepSeek-V3's multi-token prediction modules after the last layer (model.layers.N..): each an
  // embedding copy, enorm, hnorm, eh_proj [d, 2d], one decoder layer and a head copy. Described
  // (inventory, FLOPs, memory); training refuses them.
  int64_t num_nextn_predict_layers = 0;
  // k3lab's own switches for a K2-style baseline. moe_latent = false: the standard top-k MoE, its
  // experts acting on x itself (no latent projections or norm; routed_expert_hidden_size absent
  // or equal to hidden_size). moe_balancer: "quantile" (math §6) or "bias", the sign update
  // b_j += moe_bias_update_rate · sign(mean load − load_j) once per global batch.
  bool moe_latent = true;
  std::string moe_balancer = "quantile";
  double moe_bias_update_rate = 1e-3;

  // Attention Residuals (math §2); 0 means ordinary residual connections.
  int64_t attn_res_block_size = 0;

  // KDA (math §3), read from the nested "linear_attn_config"; kda_num_heads == 0 means no KDA.
  int64_t kda_num_heads = 0, kda_head_dim = 0, kda_short_conv_kernel_size = 4;
  double kda_gate_lower_bound = -5.0;
  bool kda_unbounded_gate = false;  // Kimi-Linear's −exp(A_log)·softplus(f + dt_bias) instead
  // 1-based layer lists (linear_attn_config.kda_layers / full_attn_layers): KDA layers and
  // full-attention (MLA) layers. Empty lists mean every layer is full attention.
  std::vector<int64_t> kda_layers, full_attn_layers;

  // The vision tower (K3's vision_config, and its media_placeholder_token_id), read from the
  // file's top level beside any "text_config". vision_config.image_size is k3lab's own: the one
  // square size of every image; without it (K3's released config sizes each image) the tower
  // is described but not built.
  int32_t media_placeholder_token_id = -1;
  int64_t vt_hidden_size = 0, vt_intermediate_size = 0, vt_num_attention_heads = 0;
  int64_t vt_num_hidden_layers = 0, vt_qkv_hidden_size = 0, vt_patch_size = 0;
  int64_t vt_image_size = 0, vt_pos_emb_height = 0, vt_pos_emb_width = 0;
  std::vector<int64_t> vt_merge_kernel_size = {2, 2};
  double vt_projector_ln_eps = 1e-5;

  std::string source;  // where it was read from, for error messages

  int64_t attn_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_heads() const {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  int64_t kv_dim() const { return kv_heads() * head_dim; }
  bool rope() const { return !mla_use_nope; }
  int64_t kda_dim() const { return kda_num_heads * kda_head_dim; }
  // The routed experts' input and output width: L in the latent space, else hidden_size.
  int64_t expert_dim() const { return moe_latent ? routed_expert_hidden_size : hidden_size; }
  bool has_vision() const { return vt_hidden_size > 0 && vt_image_size > 0; }
  int64_t vision_grid() const { return vt_image_size / vt_patch_size; }  // patches per side
  // Language-model tokens per image: one per 2×2 block of patches.
  int64_t image_tokens() const { return vision_grid() * vision_grid() / 4; }
  // The init std of projections writing into the residual stream, scaled down with depth as in
  // GPT-2: initializer_range / sqrt(2 · num_hidden_layers).
  float output_init_std() const;
};

// Throws k3::Error naming the file and field on a missing, mistyped or inconsistent field.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& origin);
ModelConfig load_model_config(const std::string& path);
nlohmann::json model_config_to_json(const ModelConfig& c);

// What k3lab reads and counts but does not train (multi-token prediction, YaRN, group-limited
// routing): throws one k3::Error naming the field. The trainer's pre-flight calls it.
void check_trainable(const ModelConfig& c);

}  // namespace k3::model
