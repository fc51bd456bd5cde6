#include "k3/model/config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::model {

using nlohmann::json;

namespace {

// One row per field: how to read it and write it. Adding a field is one line in kFields.
struct Field {
  const char* name;
  bool required;
  std::function<void(const json&, ModelConfig&)> read;
  std::function<json(const ModelConfig&)> write;
};

template <typename T>
Field field(const char* name, T ModelConfig::*member, bool required) {
  return Field{name, required,
               [member](const json& v, ModelConfig& c) {
                 if constexpr (std::is_same_v<T, bool>) {
                   K3_CHECK(v.is_boolean(), "expected true or false, found ", v.dump());
                 } else if constexpr (std::is_integral_v<T>) {
                   K3_CHECK(v.is_number_integer(), "expected an integer, found ", v.dump());
                   K3_CHECK(v.is_number_unsigned()
                                ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                                : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                      v.get<int64_t>() <= std::numeric_limits<T>::max(),
                            "expected an integer in [", std::numeric_limits<T>::min(), ", ",
                            std::numeric_limits<T>::max(), "], found ", v.dump());
                 } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
                   K3_CHECK(v.is_array(), "expected a list of integers, found ", v.dump());
                   for (const json& x : v) K3_CHECK(x.is_number_integer(), "expected integers, found ", x.dump());
                 } else if constexpr (std::is_floating_point_v<T>) {
                   K3_CHECK(v.is_number(), "expected a number, found ", v.dump());
                 } else {
                   K3_CHECK(v.is_string(), "expected a string, found ", v.dump());
                 }
                 c.*member = v.get<T>();
               },
               [member](const ModelConfig& c) { return json(c.*member); }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = {
      field("vocab_size", &ModelConfig::vocab_size, true),
      field("hidden_size", &ModelConfig::hidden_size, true),
      field("num_hidden_layers", &ModelConfig::num_hidden_layers, true),
      field("num_attention_heads", &ModelConfig::num_attention_heads, true),
      field("head_dim", &ModelConfig::head_dim, false),
      field("intermediate_size", &ModelConfig::intermediate_size, true),
      field("hidden_act", &ModelConfig::hidden_act, false),
      field("activation_situ_beta", &ModelConfig::activation_situ_beta, false),
      field("activation_situ_linear_beta", &ModelConfig::activation_situ_linear_beta, false),
      field("rms_norm_eps", &ModelConfig::rms_norm_eps, false),
      field("initializer_range", &ModelConfig::initializer_range, false),
      field("tie_word_embeddings", &ModelConfig::tie_word_embeddings, false),
      field("max_position_embeddings", &ModelConfig::max_position_embeddings, false),
      field("bos_token_id", &ModelConfig::bos_token_id, false),
      field("eos_token_id", &ModelConfig::eos_token_id, false),
      field("pad_token_id", &ModelConfig::pad_token_id, false),
      field("ignore_index", &ModelConfig::ignore_index, false),
      field("q_lora_rank", &ModelConfig::q_lora_rank, false),
      field("kv_lora_rank", &ModelConfig::kv_lora_rank, false),
      field("qk_nope_head_dim", &ModelConfig::qk_nope_head_dim, false),
      field("qk_rope_head_dim", &ModelConfig::qk_rope_head_dim, false),
      field("v_head_dim", &ModelConfig::v_head_dim, false),
      field("num_key_value_heads", &ModelConfig::num_key_value_heads, false),
      field("mla_use_nope", &ModelConfig::mla_use_nope, false),
      field("mla_use_output_gate", &ModelConfig::mla_use_output_gate, false),
      field("rope_theta", &ModelConfig::rope_theta, false),
      field("rope_scaling.rope_type", &ModelConfig::rope_scaling_type, false),
      field("rope_scaling.factor", &ModelConfig::rope_scaling_factor, false),
      field("rope_scaling.low_freq_factor", &ModelConfig::rope_low_freq_factor, false),
      field("rope_scaling.high_freq_factor", &ModelConfig::rope_high_freq_factor, false),
      field("rope_scaling.original_max_position_embeddings",
            &ModelConfig::rope_original_max_position_embeddings, false),
      field("num_experts", &ModelConfig::num_experts, false),
      field("num_experts_per_token", &ModelConfig::num_experts_per_token, false),
      field("moe_intermediate_size", &ModelConfig::moe_intermediate_size, false),
      field("routed_expert_hidden_size", &ModelConfig::routed_expert_hidden_size, false),
      field("num_shared_experts", &ModelConfig::num_shared_experts, false),
      field("first_k_dense_replace", &ModelConfig::first_k_dense_replace, false),
      field("routed_scaling_factor", &ModelConfig::routed_scaling_factor, false),
      field("n_group", &ModelConfig::n_group, false),
      field("topk_group", &ModelConfig::topk_group, false),
      field("num_nextn_predict_layers", &ModelConfig::num_nextn_predict_layers, false),
      field("moe_latent", &ModelConfig::moe_latent, false),
      field("moe_balancer", &ModelConfig::moe_balancer, false),
      field("moe_bias_update_rate", &ModelConfig::moe_bias_update_rate, false),
      field("attn_res_block_size", &ModelConfig::attn_res_block_size, false),
      field("linear_attn_config.num_heads", &ModelConfig::kda_num_heads, false),
      field("linear_attn_config.head_dim", &ModelConfig::kda_head_dim, false),
      field("linear_attn_config.short_conv_kernel_size", &ModelConfig::kda_short_conv_kernel_size,
            false),
      field("linear_attn_config.gate_lower_bound", &ModelConfig::kda_gate_lower_bound, false),
      field("linear_attn_config.unbounded_gate", &ModelConfig::kda_unbounded_gate, false),
      field("linear_attn_config.kda_layers", &ModelConfig::kda_layers, false),
      field("linear_attn_config.full_attn_layers", &ModelConfig::full_attn_layers, false),
      field("media_placeholder_token_id", &ModelConfig::media_placeholder_token_id, false),
      field("vision_config.vt_hidden_size", &ModelConfig::vt_hidden_size, false),
      field("vision_config.vt_intermediate_size", &ModelConfig::vt_intermediate_size, false),
      field("vision_config.vt_num_attention_heads", &ModelConfig::vt_num_attention_heads, false),
      field("vision_config.vt_num_hidden_layers", &ModelConfig::vt_num_hidden_layers, false),
      field("vision_config.qkv_hidden_size", &ModelConfig::vt_qkv_hidden_size, false),
      field("vision_config.patch_size", &ModelConfig::vt_patch_size, false),
      field("vision_config.image_size", &ModelConfig::vt_image_size, false),
      field("vision_config.init_pos_emb_height", &ModelConfig::vt_pos_emb_height, false),
      field("vision_config.init_pos_emb_width", &ModelConfig::vt_pos_emb_width, false),
      field("vision_config.merge_kernel_size", &ModelConfig::vt_merge_kernel_size, false),
      field("vision_config.projector_ln_eps", &ModelConfig::vt_projector_ln_eps, false),
  };
  return kFields;
}

// The value of a (dotted) field, or null when it or an enclosing object is absent.
const json* find_field(const json& j, const std::string& name) {
  const json* node = &j;
  for (size_t begin = 0;;) {
    const size_t dot = name.find('.', begin);
    auto it = node->find(name.substr(begin, dot - begin));
    if (it == node->end() || it->is_null()) return nullptr;
    if (dot == std::string::npos) return &*it;
    K3_CHECK_CTX(it->is_object(), (ErrorContext{"", name.substr(0, dot), -1}), "expected a JSON object");
    node = &*it;
    begin = dot + 1;
  }
}

// K3 keeps the vision tower's fields at the top level, beside "text_config".
bool top_level(const std::string& name) {
  return name.starts_with("vision_config.") || name == "media_placeholder_token_id";
}
const json& scope_of(const std::string& name, const json& root, const json& text) {
  return top_level(name) ? root : text;
}

json::json_pointer pointer_of(std::string name) {
  std::replace(name.begin(), name.end(), '.', '/');
  return json::json_pointer("/" + name);
}

// A model family published with field names of its own (docs/families.md): they are renamed to
// k3lab's, and what the family fixes fills the fields its files leave out.
struct Family {
  const char* model_type;
  const char* architecture;
  std::vector<std::pair<const char*, const char*>> renames;  // published name -> k3lab's
  json implied;
};

const std::vector<Family>& families() {
  static const std::vector<Family> kFamilies = [] {
    // Both attend with rotary embeddings and no output gate, through SwiGLU MLPs.
    const json rotary = {
        {"mla_use_nope", false}, {"mla_use_output_gate", false}, {"hidden_act", "silu"}};
    json moe = rotary;  // DeepSeek-V3's: the standard top-k MoE, its bias moved by the sign update
    moe.update({{"moe_latent", false}, {"moe_balancer", "bias"}});
    return std::vector<Family>{
        {"llama", "LlamaForCausalLM", {}, rotary},
        {"deepseek_v3",
         "DeepseekV3ForCausalLM",
         {{"n_routed_experts", "num_experts"},
          {"num_experts_per_tok", "num_experts_per_token"},
          {"n_shared_experts", "num_shared_experts"}},
         moe},
    };
  }();
  return kFamilies;
}

// The family whose model_type or architectures the file (or its text_config) names; null for
// K3's own and k3lab's configs.
const Family* family_of(const json& root, const json& j) {
  for (const json* scope : {&root, &j})
    for (const Family& f : families()) {
      const auto type = scope->find("model_type");
      if (type != scope->end() && *type == f.model_type) return &f;
      const auto arch = scope->find("architectures");
      if (arch != scope->end() && arch->is_array() &&
          std::find(arch->begin(), arch->end(), f.architecture) != arch->end())
        return &f;
    }
  return nullptr;
}

// The text scope with k3lab's names: the family's renames and implied fields, and rope_scaling's
// older "type" (DeepSeek-V3's) as "rope_type".
json in_k3lab_names(const json& j, const Family* family) {
  json out = j;
  std::vector<std::pair<const char*, const char*>> renames = {
      {"rope_scaling.type", "rope_scaling.rope_type"}};
  if (family) renames.insert(renames.end(), family->renames.begin(), family->renames.end());
  for (auto [from, to] : renames) {
    const json* v = find_field(out, from);
    if (!v) continue;
    K3_CHECK_CTX(!find_field(out, to), (ErrorContext{"", from, -1}), "the file also gives ", to,
                 ", its other name: give one");
    const json value = *v;
    const json::json_pointer src = pointer_of(from);
    out[src.parent_pointer()].erase(src.back());
    out[pointer_of(to)] = value;
  }
  if (family)
    for (const auto& [name, value] : family->implied.items())
      if (!find_field(out, name)) out[name] = value;
  return out;
}

// When the layer lists are given, every layer 1..N is in exactly one of them.
void validate_layer_lists(const ModelConfig& c) {
  const char* kda_name = "linear_attn_config.kda_layers";
  const char* full_name = "linear_attn_config.full_attn_layers";
  K3_CHECK_CTX(c.kda_layers.empty() || c.kda_num_heads > 0, (ErrorContext{"", kda_name, -1}),
               "lists KDA layers but linear_attn_config.num_heads is not set");
  if (c.kda_layers.empty() && c.full_attn_layers.empty()) return;
  std::vector<int> seen(static_cast<size_t>(c.num_hidden_layers) + 1, 0);
  for (auto [name, list] : {std::pair{kda_name, &c.kda_layers}, {full_name, &c.full_attn_layers}})
    for (int64_t n : *list) {
      K3_CHECK_CTX(n >= 1 && n <= c.num_hidden_layers, (ErrorContext{"", name, -1}), "layer ", n,
                   " is outside 1..num_hidden_layers (", c.num_hidden_layers, "); the lists are 1-based");
      K3_CHECK_CTX(++seen[static_cast<size_t>(n)] == 1, (ErrorContext{"", name, -1}), "layer ", n,
                   " appears twice (within or across kda_layers and full_attn_layers)");
    }
  for (int64_t n = 1; n <= c.num_hidden_layers; ++n)
    K3_CHECK_CTX(seen[static_cast<size_t>(n)] == 1, (ErrorContext{"", kda_name, -1}), "layer ", n,
                 " is in neither kda_layers nor full_attn_layers (num_hidden_layers = ", c.num_hidden_layers, ")");
}

void validate_moe(const ModelConfig& c) {
  if (c.num_experts == 0) return;
  auto ctx = [](const char* f) { return ErrorContext{"", f, -1}; };
  K3_CHECK_CTX(c.num_experts_per_token >= 1 && c.num_experts_per_token < c.num_experts,
               ctx("num_experts_per_token"), "expected 1 <= k < num_experts (", c.num_experts,
               "): the routing reads the (k+1)-th score as its cutoff, found ", c.num_experts_per_token);
  K3_CHECK_CTX(c.moe_intermediate_size > 0, ctx("moe_intermediate_size"), "must be positive with num_experts > 0");
  if (c.moe_latent)
    K3_CHECK_CTX(c.routed_expert_hidden_size > 0, ctx("routed_expert_hidden_size"),
                 "must be positive with num_experts > 0 (or moe_latent false)");
  else
    K3_CHECK_CTX(c.routed_expert_hidden_size == 0 || c.routed_expert_hidden_size == c.hidden_size,
                 ctx("routed_expert_hidden_size"),
                 "with moe_latent false the experts act on x itself: expected it absent or equal "
                 "to hidden_size (", c.hidden_size, "), found ", c.routed_expert_hidden_size);
  K3_CHECK_CTX(c.moe_balancer == "quantile" || c.moe_balancer == "bias", ctx("moe_balancer"),
               "expected \"quantile\" or \"bias\", found \"", c.moe_balancer, "\"");
  K3_CHECK_CTX(c.moe_bias_update_rate > 0 && std::isfinite(c.moe_bias_update_rate),
               ctx("moe_bias_update_rate"), "must be positive and finite, found ",
               c.moe_bias_update_rate);
  K3_CHECK_CTX(c.first_k_dense_replace <= c.num_hidden_layers, ctx("first_k_dense_replace"),
               "expected 0..num_hidden_layers, found ", c.first_k_dense_replace);
  K3_CHECK_CTX(c.num_experts % c.n_group == 0, ctx("n_group"), "the ", c.num_experts,
               " experts do not split into ", c.n_group, " equal groups");
  K3_CHECK_CTX(c.topk_group <= c.n_group, ctx("topk_group"), "expected 1..n_group (", c.n_group,
               "), found ", c.topk_group);
}

// The attention's heads and positions: grouped keys and values (plain attention only), rotary
// embeddings over pairs of dimensions, and the rope scalings k3lab knows.
void validate_attention(const ModelConfig& c) {
  auto ctx = [](const char* f) { return ErrorContext{"", f, -1}; };
  const int64_t H = c.num_attention_heads, kv = c.num_key_value_heads;
  if (c.q_lora_rank > 0)
    K3_CHECK_CTX(kv == H, ctx("num_key_value_heads"), "expected num_attention_heads (", H,
                 "): MLA's heads share one latent, each expanding its own keys and values, found ",
                 kv);
  else
    K3_CHECK_CTX(H % kv == 0, ctx("num_key_value_heads"),
                 "expected a divisor of num_attention_heads (", H,
                 "): heads share keys and values in equal groups, found ", kv);
  if (c.rope()) {
    K3_CHECK_CTX(c.rope_theta > 1 && std::isfinite(c.rope_theta), ctx("rope_theta"),
                 "expected a finite base above 1, found ", c.rope_theta);
    const bool mla = c.q_lora_rank > 0;
    const int64_t d = mla ? c.qk_rope_head_dim : c.head_dim;
    K3_CHECK_CTX(d % 2 == 0, ctx(mla ? "qk_rope_head_dim" : "head_dim"),
                 "rotary embeddings turn pairs of dimensions: expected an even size, found ", d);
  }
  const std::string& type = c.rope_scaling_type;
  K3_CHECK_CTX(type.empty() || type == "default" || type == "llama3" || type == "yarn",
               ctx("rope_scaling.rope_type"), "expected \"llama3\" or \"yarn\" (or none), found \"",
               type, "\"");
  if (type == "llama3" || type == "yarn") {
    K3_CHECK_CTX(c.rope_scaling_factor >= 1 && std::isfinite(c.rope_scaling_factor),
                 ctx("rope_scaling.factor"), "expected a finite factor of at least 1, found ",
                 c.rope_scaling_factor);
    K3_CHECK_CTX(c.rope_original_max_position_embeddings > 0,
                 ctx("rope_scaling.original_max_position_embeddings"),
                 "must be positive with rope_scaling ", type);
  }
  if (type == "llama3")
    K3_CHECK_CTX(c.rope_low_freq_factor > 0 && c.rope_high_freq_factor > c.rope_low_freq_factor &&
                     std::isfinite(c.rope_high_freq_factor),
                 ctx("rope_scaling.high_freq_factor"),
                 "expected 0 < low_freq_factor < high_freq_factor, found ", c.rope_low_freq_factor,
                 " and ", c.rope_high_freq_factor);
}

// Bounds on the sizes, far above any real model (K3: 93 layers, 896 experts, 96 heads, widths up to
// 33792, a vocabulary of 163840) and low enough that nothing downstream can overflow or run away:
// the largest tensor (q_b_proj, [heads·(d_n + d_r), q_lora_rank]) stays below 2^41 elements, all
// parameters together below 2^60, so every element count and offset fits int64; and a model built
// without allocation (`model inspect`, the run's memory check) stays cheap: it registers three
// tensors and keeps an 8 KB Quantile Balancing histogram per expert block, so K3's 82432 blocks
// take about 2 s and 0.8 GB, and kMaxExpertBlocks (1.6x K3) about 4 s and 1.4 GB.
constexpr int64_t kMaxWidth = int64_t{1} << 18;  // hidden, intermediate, ranks, expert widths
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 10;
constexpr int64_t kMaxLayers = int64_t{1} << 10;
constexpr int64_t kMaxExperts = int64_t{1} << 14;
constexpr int64_t kMaxExpertBlocks = int64_t{1} << 17;  // num_experts x num_hidden_layers
constexpr int64_t kMaxSharedExperts = 64;
constexpr int64_t kMaxConvKernel = 64;
constexpr int64_t kMaxPositions = int64_t{1} << 31;

struct SizeRange {
  const char* name;
  int64_t ModelConfig::*member;
  int64_t lo, hi;
};

// Sizes that may be 0 mean "absent" (no MLA ranks, no experts, no KDA, ordinary residuals).
const std::vector<SizeRange>& size_ranges() {
  using C = ModelConfig;
  static const std::vector<SizeRange> kRanges = {
      {"vocab_size", &C::vocab_size, 1, kMaxVocab},
      {"hidden_size", &C::hidden_size, 1, kMaxWidth},
      {"num_hidden_layers", &C::num_hidden_layers, 1, kMaxLayers},
      {"num_attention_heads", &C::num_attention_heads, 1, kMaxHeads},
      {"head_dim", &C::head_dim, 0, kMaxHeadDim},
      {"intermediate_size", &C::intermediate_size, 1, kMaxWidth},
      {"max_position_embeddings", &C::max_position_embeddings, 1, kMaxPositions},
      {"q_lora_rank", &C::q_lora_rank, 0, kMaxWidth},
      {"kv_lora_rank", &C::kv_lora_rank, 0, kMaxWidth},
      {"qk_nope_head_dim", &C::qk_nope_head_dim, 0, kMaxHeadDim},
      {"qk_rope_head_dim", &C::qk_rope_head_dim, 0, kMaxHeadDim},
      {"v_head_dim", &C::v_head_dim, 0, kMaxHeadDim},
      {"num_key_value_heads", &C::num_key_value_heads, 0, kMaxHeads},
      {"rope_scaling.original_max_position_embeddings", &C::rope_original_max_position_embeddings,
       0, kMaxPositions},
      {"num_experts", &C::num_experts, 0, kMaxExperts},
      {"num_experts_per_token", &C::num_experts_per_token, 0, kMaxExperts},
      {"moe_intermediate_size", &C::moe_intermediate_size, 0, kMaxWidth},
      {"routed_expert_hidden_size", &C::routed_expert_hidden_size, 0, kMaxWidth},
      {"num_shared_experts", &C::num_shared_experts, 0, kMaxSharedExperts},
      {"first_k_dense_replace", &C::first_k_dense_replace, 0, kMaxLayers},
      {"n_group", &C::n_group, 1, kMaxExperts},
      {"topk_group", &C::topk_group, 1, kMaxExperts},
      {"num_nextn_predict_layers", &C::num_nextn_predict_layers, 0, kMaxLayers},
      {"attn_res_block_size", &C::attn_res_block_size, 0, kMaxLayers},
      {"linear_attn_config.num_heads", &C::kda_num_heads, 0, kMaxHeads},
      {"linear_attn_config.head_dim", &C::kda_head_dim, 0, kMaxHeadDim},
      {"linear_attn_config.short_conv_kernel_size", &C::kda_short_conv_kernel_size, 1,
       kMaxConvKernel},
  };
  return kRanges;
}

// Fields of the HF config that k3lab does not read because it implements one meaning of them: any
// other value asks for a model k3lab would not build.
struct FixedField {
  const char* name;
  json value;
  const char* why;
};

const std::vector<FixedField>& fixed_fields() {
  static const std::vector<FixedField> kFixed = {
      {"moe_router_activation_func", "sigmoid", "the router scores are sigmoids"},
      {"vision_config.norm_type", "rmsnorm", "the vision tower's norms are RMSNorms"},
      {"vision_config.mlp_type", "mlp2", "the vision tower's MLP is fc0, GELU, fc1"},
      {"vision_config.activation_func", "gelu_pytorch_tanh", "the tower's GELU is the tanh form"},
      {"vision_config.projector_hidden_act", "gelu", "the projector's GELU is the exact one"},
      {"vision_config.mm_projector_type", "patchmergerv2", "2×2 patches merge, then project"},
      {"vision_config.linear_bias", false, "the tower's projections have no bias"},
      {"vision_config.attn_bias", false, "the tower's attention has no bias"},
      {"vision_config.patch_embed_proj_bias", false, "the patch embedding has no bias"},
      {"moe_renormalize", true, "the routing weights are renormalized over the chosen experts"},
      {"moe_layer_freq", 1, "every layer from first_k_dense_replace on is a MoE layer"},
      {"latent_moe_use_norm", true, "the routed experts' latent output is RMS-normalized"},
      {"scoring_func", "sigmoid", "the router scores are sigmoids"},
      {"norm_topk_prob", true, "the routing weights are renormalized over the chosen experts"},
      {"topk_method", "noaux_tc", "no auxiliary loss: a balancer moves the router bias"},
      {"attention_bias", false, "the attention projections have no bias"},
      {"mlp_bias", false, "the MLP projections have no bias"},
  };
  return kFixed;
}

void validate_fixed_fields(const json& root, const json& j) {
  for (const FixedField& f : fixed_fields()) {
    const json* v = find_field(scope_of(f.name, root, j), f.name);
    K3_CHECK_CTX(!v || *v == f.value, (ErrorContext{"", f.name, -1}), "expected ", f.value.dump(),
                 " (k3lab implements only that: ", f.why, "), found ", v->dump());
  }
}

void validate_sizes(const ModelConfig& c) {
  for (const SizeRange& r : size_ranges()) {
    const int64_t v = c.*r.member;
    K3_CHECK_CTX(v >= r.lo && v <= r.hi, (ErrorContext{"", r.name, -1}), "expected ",
                 r.lo == 0 ? "0 (absent) or a size" : "a size", " in [", std::max<int64_t>(r.lo, 1),
                 ", ", r.hi, "], found ", v);
  }
  const int64_t layers = c.num_hidden_layers + c.num_nextn_predict_layers;
  K3_CHECK_CTX(c.num_experts * layers <= kMaxExpertBlocks, (ErrorContext{"", "num_experts", -1}),
               "num_experts x layers (with multi-token prediction's) = ", c.num_experts, " x ",
               layers, " exceeds the ", kMaxExpertBlocks, " expert blocks k3lab can describe");
}

void validate_vision(const ModelConfig& c) {
  if (!c.has_vision()) return;
  auto ctx = [](const char* name) { return ErrorContext{"", name, -1}; };
  for (auto [name, v] : {std::pair{"vision_config.vt_intermediate_size", c.vt_intermediate_size},
                         {"vision_config.vt_num_attention_heads", c.vt_num_attention_heads},
                         {"vision_config.vt_num_hidden_layers", c.vt_num_hidden_layers},
                         {"vision_config.qkv_hidden_size", c.vt_qkv_hidden_size},
                         {"vision_config.patch_size", c.vt_patch_size}})
    K3_CHECK_CTX(v >= 1 && v <= kMaxWidth, ctx(name), "expected a size in [1, ", kMaxWidth,
                 "] for the vision tower, found ", v);
  K3_CHECK_CTX(c.vt_qkv_hidden_size % c.vt_num_attention_heads == 0,
               ctx("vision_config.qkv_hidden_size"), c.vt_qkv_hidden_size,
               " does not split into vt_num_attention_heads = ", c.vt_num_attention_heads);
  K3_CHECK_CTX(c.vt_image_size % c.vt_patch_size == 0 && c.vision_grid() % 2 == 0,
               ctx("vision_config.image_size"), "expected an even number of patch_size (",
               c.vt_patch_size, ") patches per side, found ", c.vt_image_size);
  K3_CHECK_CTX(c.vt_merge_kernel_size == std::vector<int64_t>({2, 2}),
               ctx("vision_config.merge_kernel_size"), "expected [2, 2]: 2×2 patches merge");
  for (auto [name, v] : {std::pair{"vision_config.init_pos_emb_height", c.vt_pos_emb_height},
                         {"vision_config.init_pos_emb_width", c.vt_pos_emb_width}})
    K3_CHECK_CTX(v == c.vision_grid(), ctx(name), "expected image_size / patch_size = ",
                 c.vision_grid(), ": every image has one size, so position embeddings are not "
                 "interpolated; found ", v);
  K3_CHECK_CTX(c.media_placeholder_token_id >= 0 && c.media_placeholder_token_id < c.vocab_size,
               ctx("media_placeholder_token_id"), "expected a token of the vocabulary of ",
               c.vocab_size, " to mark where image tokens go, found ", c.media_placeholder_token_id);
  K3_CHECK_CTX(c.vt_projector_ln_eps > 0, ctx("vision_config.projector_ln_eps"),
               "must be positive, found ", c.vt_projector_ln_eps);
}

void validate(const ModelConfig& c) {
  validate_sizes(c);
  auto positive = [](const char* name, double v) {
    K3_CHECK_CTX(v > 0 && std::isfinite(v), (ErrorContext{"", name, -1}),
                 "must be positive and finite, found ", v);
  };
  positive("rms_norm_eps", c.rms_norm_eps);
  positive("initializer_range", c.initializer_range);
  positive("activation_situ_beta", c.activation_situ_beta);
  positive("activation_situ_linear_beta", c.activation_situ_linear_beta);
  positive("routed_scaling_factor", c.routed_scaling_factor);
  // The plain gated attention (no MLA ranks) splits hidden_size into heads of head_dim.
  if (c.q_lora_rank == 0)
    K3_CHECK_CTX(
        c.head_dim > 0, (ErrorContext{"", "head_dim", -1}),
        "head_dim must be positive (or absent with hidden_size divisible by num_attention_heads)");
  K3_CHECK_CTX(c.hidden_act == "situ" || c.hidden_act == "silu",
               (ErrorContext{"", "hidden_act", -1}), "expected \"situ\" or \"silu\", found \"",
               c.hidden_act, "\"");
  K3_CHECK_CTX(!c.tie_word_embeddings, (ErrorContext{"", "tie_word_embeddings", -1}),
               "k3lab's LM head is a matrix of its own: expected false");
  if (c.kda_num_heads > 0) {
    positive("linear_attn_config.head_dim", double(c.kda_head_dim));
    const double lb = c.kda_gate_lower_bound;
    K3_CHECK_CTX(c.kda_unbounded_gate || (lb < 0 && std::isfinite(lb)),
                 (ErrorContext{"", "linear_attn_config.gate_lower_bound", -1}),
                 "expected a finite negative bound, found ", lb);
  }
  validate_layer_lists(c);
  validate_attention(c);
  validate_moe(c);
  validate_vision(c);
  for (auto [name, id] : {std::pair{"bos_token_id", c.bos_token_id},
                          {"eos_token_id", c.eos_token_id},
                          {"pad_token_id", c.pad_token_id}})
    K3_CHECK_CTX(id >= -1 && id < c.vocab_size, (ErrorContext{"", name, -1}), "token id ", id,
                 " is outside the vocabulary of ", c.vocab_size, " (-1: none)");
  K3_CHECK_CTX(c.ignore_index < 0 || c.ignore_index >= c.vocab_size,
               (ErrorContext{"", "ignore_index", -1}), "target ", c.ignore_index,
               " is a token of the vocabulary of ", c.vocab_size,
               ": expected a value outside it (e.g. -100)");
}

}  // namespace

float ModelConfig::output_init_std() const {
  return static_cast<float>(initializer_range) / std::sqrt(2.0f * static_cast<float>(num_hidden_layers));
}

ModelConfig parse_model_config(const json& root, const std::string& origin) {
  K3_CHECK_CTX(root.is_object(), (ErrorContext{origin, "", -1}), "a model config must be a JSON object");
  const json& text = root.contains("text_config") ? root.at("text_config") : root;
  K3_CHECK_CTX(text.is_object(), (ErrorContext{origin, "text_config", -1}),
               "expected a JSON object");
  json j;
  try {
    j = in_k3lab_names(text, family_of(root, text));
  } catch (const Error& e) {
    throw e.with_file(origin);
  }
  ModelConfig c;
  c.source = origin;
  for (const Field& f : fields()) {
    try {
      const json* v = find_field(scope_of(f.name, root, j), f.name);
      K3_CHECK(v || !f.required, "required field is missing");
      if (v) f.read(*v, c);
    } catch (const Error& e) {
      throw e.with_file(origin).with_field(f.name);
    }
  }
  if (c.head_dim == 0 && c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0)
    c.head_dim = c.hidden_size / c.num_attention_heads;
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  try {
    validate(c);
    validate_fixed_fields(root, j);
  } catch (const Error& e) {
    throw e.with_file(origin);
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::string text = read_file(path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(std::string("invalid JSON: ") + e.what(), ErrorContext{path, "", -1});
  }
  return parse_model_config(j, path);
}

json model_config_to_json(const ModelConfig& c) {
  json j = json::object();
  for (const Field& f : fields()) j[pointer_of(f.name)] = f.write(c);
  return j;
}

void check_trainable(const ModelConfig& c) {
  auto ctx = [&](const char* f) { return ErrorContext{c.source, f, -1}; };
  K3_CHECK_CTX(c.num_nextn_predict_layers == 0, ctx("num_nextn_predict_layers"),
               c.num_nextn_predict_layers,
               " multi-token prediction layer(s) are counted "
               "(parameters, FLOPs, memory) but not trained: set 0 to train without them");
  K3_CHECK_CTX(c.rope_scaling_type != "yarn", ctx("rope_scaling.rope_type"),
               "YaRN is read for planning but not trained (its frequencies and attention scale "
               "are not implemented)");
  K3_CHECK_CTX(c.n_group == 1, ctx("n_group"), "group-limited routing (", c.n_group,
               " groups) is counted but not trained: set 1, every expert open to every token");
}

}  // namespace k3::model
