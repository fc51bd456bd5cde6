#include "k3/model/config.h"

#include <algorithm>
#include <cmath>
#include <functional>
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
      field("num_experts", &ModelConfig::num_experts, false),
      field("num_experts_per_token", &ModelConfig::num_experts_per_token, false),
      field("moe_intermediate_size", &ModelConfig::moe_intermediate_size, false),
      field("routed_expert_hidden_size", &ModelConfig::routed_expert_hidden_size, false),
      field("num_shared_experts", &ModelConfig::num_shared_experts, false),
      field("first_k_dense_replace", &ModelConfig::first_k_dense_replace, false),
      field("routed_scaling_factor", &ModelConfig::routed_scaling_factor, false),
      field("attn_res_block_size", &ModelConfig::attn_res_block_size, false),
      field("linear_attn_config.num_heads", &ModelConfig::kda_num_heads, false),
      field("linear_attn_config.head_dim", &ModelConfig::kda_head_dim, false),
      field("linear_attn_config.short_conv_kernel_size", &ModelConfig::kda_short_conv_kernel_size,
            false),
      field("linear_attn_config.gate_lower_bound", &ModelConfig::kda_gate_lower_bound, false),
      field("linear_attn_config.unbounded_gate", &ModelConfig::kda_unbounded_gate, false),
      field("linear_attn_config.kda_layers", &ModelConfig::kda_layers, false),
      field("linear_attn_config.full_attn_layers", &ModelConfig::full_attn_layers, false),
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

json::json_pointer pointer_of(std::string name) {
  std::replace(name.begin(), name.end(), '.', '/');
  return json::json_pointer("/" + name);
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
  K3_CHECK_CTX(c.num_experts > 0, ctx("num_experts"), "must not be negative");
  K3_CHECK_CTX(c.num_experts_per_token >= 1 && c.num_experts_per_token < c.num_experts,
               ctx("num_experts_per_token"), "expected 1 <= k < num_experts (", c.num_experts,
               "): Quantile Balancing needs the (k+1)-th score, found ", c.num_experts_per_token);
  K3_CHECK_CTX(c.moe_intermediate_size > 0, ctx("moe_intermediate_size"), "must be positive with num_experts > 0");
  K3_CHECK_CTX(c.routed_expert_hidden_size > 0, ctx("routed_expert_hidden_size"),
               "must be positive with num_experts > 0");
  K3_CHECK_CTX(c.num_shared_experts >= 0, ctx("num_shared_experts"), "must not be negative");
  K3_CHECK_CTX(c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= c.num_hidden_layers,
               ctx("first_k_dense_replace"), "expected 0..num_hidden_layers, found ", c.first_k_dense_replace);
}

void validate(const ModelConfig& c) {
  auto positive = [](const char* name, double v) {
    K3_CHECK_CTX(v > 0, (ErrorContext{"", name, -1}), "must be positive, found ", v);
  };
  positive("vocab_size", double(c.vocab_size));
  positive("hidden_size", double(c.hidden_size));
  positive("num_hidden_layers", double(c.num_hidden_layers));
  positive("num_attention_heads", double(c.num_attention_heads));
  positive("intermediate_size", double(c.intermediate_size));
  positive("rms_norm_eps", c.rms_norm_eps);
  positive("initializer_range", c.initializer_range);
  positive("max_position_embeddings", double(c.max_position_embeddings));
  positive("activation_situ_beta", c.activation_situ_beta);
  positive("activation_situ_linear_beta", c.activation_situ_linear_beta);
  // The plain gated attention (no MLA ranks) splits hidden_size into heads of head_dim.
  if (c.q_lora_rank == 0)
    K3_CHECK_CTX(c.head_dim > 0, (ErrorContext{"", "head_dim", -1}),
                 "head_dim must be positive (or absent with hidden_size divisible by num_attention_heads)");
  K3_CHECK_CTX(c.hidden_act == "situ" || c.hidden_act == "silu", (ErrorContext{"", "hidden_act", -1}),
               "expected \"situ\" or \"silu\", found \"", c.hidden_act, "\"");
  K3_CHECK_CTX(!c.tie_word_embeddings, (ErrorContext{"", "tie_word_embeddings", -1}),
               "K3 has an untied LM head: expected false");
  K3_CHECK_CTX(c.kda_num_heads >= 0, (ErrorContext{"", "linear_attn_config.num_heads", -1}),
               "must not be negative, found ", c.kda_num_heads);
  if (c.kda_num_heads > 0) {
    positive("linear_attn_config.head_dim", double(c.kda_head_dim));
    positive("linear_attn_config.short_conv_kernel_size", double(c.kda_short_conv_kernel_size));
    const double lb = c.kda_gate_lower_bound;
    K3_CHECK_CTX(c.kda_unbounded_gate || (lb < 0 && std::isfinite(lb)),
                 (ErrorContext{"", "linear_attn_config.gate_lower_bound", -1}),
                 "expected a finite negative bound, found ", lb);
  }
  validate_layer_lists(c);
  validate_moe(c);
  for (auto [name, id] : {std::pair{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_id},
                          {"pad_token_id", c.pad_token_id}})
    K3_CHECK_CTX(id < c.vocab_size, (ErrorContext{"", name, -1}), "token id ", id,
                 " is outside the vocabulary of ", c.vocab_size);
}

}  // namespace

float ModelConfig::output_init_std() const {
  return static_cast<float>(initializer_range) / std::sqrt(2.0f * static_cast<float>(num_hidden_layers));
}

ModelConfig parse_model_config(const json& root, const std::string& origin) {
  K3_CHECK_CTX(root.is_object(), (ErrorContext{origin, "", -1}), "a model config must be a JSON object");
  const json& j = root.contains("text_config") ? root.at("text_config") : root;
  K3_CHECK_CTX(j.is_object(), (ErrorContext{origin, "text_config", -1}), "expected a JSON object");
  ModelConfig c;
  c.source = origin;
  for (const Field& f : fields()) {
    try {
      const json* v = find_field(j, f.name);
      K3_CHECK(v || !f.required, "required field is missing");
      if (v) f.read(*v, c);
    } catch (const Error& e) {
      throw e.with_file(origin).with_field(f.name);
    }
  }
  if (c.head_dim == 0 && c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0)
    c.head_dim = c.hidden_size / c.num_attention_heads;
  try {
    validate(c);
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

}  // namespace k3::model
