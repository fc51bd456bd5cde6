// Model families as released (model/config.h, docs/families.md): Llama's and DeepSeek-V3's
// config.json read with their own field names, k3lab's own configs unchanged, the parameter totals
// of the published models to the parameter, and what k3lab reads but does not train refused in
// one line naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/test_util.h"
#include "k3/base/fs.h"
#include "k3/model/inventory.h"
#include "k3/model/layer_factory.h"

namespace k3::model::families_test {
namespace {

using nlohmann::json;

std::string path(const std::string& name) { return testing::source_dir() + "/configs/" + name; }
ModelConfig config(const std::string& name) { return load_model_config(path(name)); }
json read_json(const std::string& name) { return json::parse(read_file(path(name))); }

// One k3::Error's message, naming `field`, on one line.
void expect_one_line(const std::string& e, const std::string& field) {
  EXPECT_NE(e.find("field " + field + ":"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(Families, LlamaReadsAsPublished) {
  const ModelConfig c = config("llama-3.1-8b.json");
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.rope());
  EXPECT_FALSE(c.mla_use_output_gate);
  EXPECT_EQ(c.rope_theta, 500000);
  EXPECT_EQ(c.rope_scaling_type, "llama3");
  EXPECT_EQ(c.rope_scaling_factor, 8);
  EXPECT_EQ(c.rope_low_freq_factor, 1);
  EXPECT_EQ(c.rope_high_freq_factor, 4);
  EXPECT_EQ(c.rope_original_max_position_embeddings, 8192);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(mixer_kind(c, 0), MixerKind::GatedAttention);
  EXPECT_EQ(ffn_kind(c, 31), FfnKind::DenseMlp);
  // Hugging Face's names for every tensor of a layer.
  const Model m(c, /*allocate=*/false);
  for (const char* name :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
        "model.norm.weight", "lm_head.weight"})
    EXPECT_GE(m.params().find(name), 0) << name;
  EXPECT_EQ(m.params().info(m.params().find("model.layers.0.self_attn.k_proj.weight")).shape,
            (Shape{8 * 128, 4096}));
  EXPECT_EQ(m.params().size(), 2 + 32 * 9 + 1);
}

TEST(Families, DeepSeekV3ReadsAsPublished) {
  const ModelConfig c = config("deepseek-v3.json");
  EXPECT_EQ(c.num_experts, 256);  // n_routed_experts
  EXPECT_EQ(c.num_experts_per_token, 8);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_FALSE(c.moe_latent);  // the standard MoE, its bias moved by the sign update (noaux_tc)
  EXPECT_EQ(c.moe_balancer, "bias");
  EXPECT_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.first_k_dense_replace, 3);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_TRUE(c.rope());
  EXPECT_FALSE(c.mla_use_output_gate);
  EXPECT_EQ(c.rope_scaling_type, "yarn");  // "type" in the file
  EXPECT_EQ(c.rope_scaling_factor, 40);
  EXPECT_EQ(mixer_kind(c, 0), MixerKind::GatedMLA);
  EXPECT_EQ(ffn_kind(c, 2), FfnKind::DenseMlp);
  EXPECT_EQ(ffn_kind(c, 3), FfnKind::LatentMoE);
  // A file may give a field by one name only.
  json j = read_json("deepseek-v3.json");
  j["num_experts"] = 256;
  expect_one_line(testing::error_of([&] { parse_model_config(j, "v3.json"); }), "n_routed_experts");
}

// The fields the families brought are at their old meaning in every other config: every head its
// own keys and values, NoPE, the output gate, no multi-token prediction, no expert groups.
TEST(Families, OwnConfigsReadAsBefore) {
  for (const char* name : {"dense-tiny.json", "dense-small.json", "k2-nano.json", "k3-micro.json",
                           "k3-micro-4k.json", "k3-micro-long.json", "k3-micro-vision.json",
                           "k3-nano.json", "k3-nano-vision.json", "k3-small.json", "k3.json"}) {
    const ModelConfig c = config(name);
    EXPECT_EQ(c.num_key_value_heads, c.num_attention_heads) << name;
    EXPECT_TRUE(c.mla_use_nope && c.mla_use_output_gate && !c.rope()) << name;
    EXPECT_EQ(c.rope_scaling_type, "") << name;
    EXPECT_EQ(c.num_nextn_predict_layers, 0) << name;
    EXPECT_EQ(c.n_group, 1) << name;
    // And what they write reads back the same.
    EXPECT_EQ(model_config_to_json(parse_model_config(model_config_to_json(c), "again")),
              model_config_to_json(c))
        << name;
  }
}

int64_t total(const std::string& name) {
  return parameter_counts(Model(config(name), /*allocate=*/false)).back().total;
}

// The totals Hugging Face shows for the released safetensors (the model pages' "Safetensors"
// box, every tensor BF16): huggingface.co/meta-llama/Llama-3.1-8B, -70B and -405B.
TEST(Families, LlamaTotalsEqualThePublishedOnes) {
  EXPECT_EQ(total("llama-3.1-8b.json"), 8'030'261'248);
  EXPECT_EQ(total("llama-3.1-70b.json"), 70'553'706'496);
  EXPECT_EQ(total("llama-3.1-405b.json"), 405'853'388'800);
}

// DeepSeek-V3 (arXiv:2412.19437; huggingface.co/deepseek-ai/DeepSeek-V3, README_WEIGHTS.md):
// "671B total parameters" in the main model, "36.6B" activated per token (including the 0.9B
// head, the embedding excluded; the report rounds it to 37B), and on Hugging Face 684,531,386,000
// (shown as 685B), the safetensors total: BF16 3,918,786,560, F8_E4M3 680,571,043,840 and F32
// 41,555,600. The released files hold the multi-token prediction module (model.layers.61) with
// its own copies of the embedding and the head, FP8 weights for the attention and MLP projections
// with one fp32 scale per 128 x 128 block (weight_scale_inv), and the router biases in fp32.
TEST(Families, DeepSeekV3TotalsEqualThePublishedOnes) {
  const Model m(config("deepseek-v3.json"), /*allocate=*/false);
  int64_t main = 0, mtp = 0, active_main = 0, bf16 = 0, f8 = 0, f32 = 0;
  for (const ComponentCount& cc : parameter_counts(m)) {
    if (cc.component == "total") continue;
    (cc.component.starts_with("mtp.") ? mtp : main) += cc.total;
    if (!cc.component.starts_with("mtp.") && cc.component != "embedding") active_main += cc.active;
  }
  EXPECT_EQ(main, 671'026'419'200);  // "671B"
  EXPECT_EQ(mtp, 13'463'426'304);    // 11.6B of its own, 1.85B of copies
  EXPECT_NEAR(static_cast<double>(active_main), 36.6e9, 0.05e9);
  for (const TensorEntry& t : tensor_inventory(m)) {
    const int64_t n = shape_numel(t.shape);
    const bool projection =
        t.shape.size() == 2 && (t.component.ends_with("mla") || t.component.ends_with("mlp") ||
                                t.component.ends_with("experts"));
    if (t.release_dtype == "fp32") {
      f32 += n;  // the router biases
    } else if (projection) {
      f8 += n;
      f32 += (t.shape[0] + 127) / 128 * ((t.shape[1] + 127) / 128);
    } else {
      bf16 += n;
    }
  }
  EXPECT_EQ(bf16, 3'918'786'560);
  EXPECT_EQ(f8, 680'571'043'840);
  EXPECT_EQ(f32, 41'555'600);
  EXPECT_EQ(bf16 + f8 + f32, 684'531'386'000);
}

// The module's FLOPs count as a layer's: eh_proj, the MLA, the k + shared experts and the router,
// the head's copy (the embedding's is a lookup), and its attention's mixing.
TEST(Families, MultiTokenPredictionIsInTheFlops) {
  ModelConfig without = config("deepseek-v3.json");
  without.num_nextn_predict_layers = 0;
  const Model a(config("deepseek-v3.json"), false), b(without, false);
  const int64_t d = 7168, experts = 3 * d * 2048;
  EXPECT_EQ(a.matmul_params() - b.matmul_params(),
            2 * d * d + 187'105'280 + 9 * experts + 256 * d + 129280 * d);
  const int64_t T = 4096;
  EXPECT_DOUBLE_EQ(a.train_flops_per_token(T) - b.train_flops_per_token(T),
                   6.0 * static_cast<double>(a.matmul_params() - b.matmul_params()) +
                       3.0 * T * 128 * (128 + 64 + 128));
}

TEST(Families, WhatIsReadButNotTrainedIsRefusedInOneLine) {
  ModelConfig c = config("deepseek-v3-nano.json");
  EXPECT_EQ(testing::error_of([&] { check_trainable(c); }), "");
  for (auto [field, change] :
       {std::pair<const char*, void (*)(ModelConfig&)>{
            "num_nextn_predict_layers", [](ModelConfig& m) { m.num_nextn_predict_layers = 1; }},
        {"rope_scaling.rope_type", [](ModelConfig& m) { m.rope_scaling_type = "yarn"; }},
        {"n_group", [](ModelConfig& m) { m.n_group = 2; }}}) {
    ModelConfig m = c;
    change(m);
    expect_one_line(testing::error_of([&] { check_trainable(m); }), field);
  }
  // Published DeepSeek-V3 has all three; the first named is the prediction module.
  expect_one_line(testing::error_of([&] { check_trainable(config("deepseek-v3.json")); }),
                  "num_nextn_predict_layers");
}

TEST(Families, WhatIsNotImplementedIsRefusedInOneLine) {
  json j = read_json("llama-nano.json");
  j["attention_bias"] = true;
  expect_one_line(testing::error_of([&] { parse_model_config(j, "l.json"); }), "attention_bias");
  j = read_json("llama-nano.json");
  j["num_key_value_heads"] = 3;
  expect_one_line(testing::error_of([&] { parse_model_config(j, "l.json"); }),
                  "num_key_value_heads");
  // 8 key-value heads do not split over 16 tensor-parallel ranks, though the 32 heads would.
  const std::string e =
      testing::error_of([&] { check_tensor_parallel(config("llama-3.1-8b.json"), 16); });
  expect_one_line(e, "num_key_value_heads");
  EXPECT_NE(e.find("8 key-value heads do not split evenly over the tensor-parallel group of size "
                   "16"),
            std::string::npos)
      << e;
  EXPECT_EQ(testing::error_of([&] { check_tensor_parallel(config("llama-3.1-8b.json"), 8); }), "");
}

}  // namespace
}  // namespace k3::model::families_test
