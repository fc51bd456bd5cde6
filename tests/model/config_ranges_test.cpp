// Model config values with no meaning, and sizes out of range, are refused by parsing, naming the
// field; the real K3 config and every config in configs/ pass.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "common/test_util.h"
#include "k3/base/fs.h"
#include "k3/model/config.h"

namespace k3::model {
namespace {

using nlohmann::json;

json read_json(const std::string& path) { return json::parse(read_file(path)); }

std::string error_of(const json& j) {
  return testing::error_of([&] { parse_model_config(j, "cfg.json"); });
}

// The error names FIELD.
void expect_refused(const json& j, const std::string& field) {
  const std::string e = error_of(j);
  EXPECT_NE(e.find("field " + field + ":"), std::string::npos) << "got: '" << e << "'";
}

TEST(ModelConfigRanges, RealConfigsPass) {
  for (const char* name : {"dense-tiny", "dense-small", "k3-micro", "k3-nano", "k3-small"})
    EXPECT_EQ(error_of(read_json(testing::source_dir() + "/configs/" + name + ".json")), "")
        << name;
}

TEST(ModelConfigRanges, ReleasedK3ConfigPasses) {
  K3_SKIP_WITHOUT_SHARED("reference/kimi-k3/config.json", "the released K3 config");
  EXPECT_EQ(error_of(read_json(testing::shared_dir() + "/reference/kimi-k3/config.json")), "");
}

TEST(ModelConfigRanges, ValuesWithoutMeaningNameTheField) {
  const json k3 = read_json(testing::source_dir() + "/configs/k3-micro.json");
  auto with = [&](const std::string& pointer, json value) {
    json j = k3;
    j[json::json_pointer(pointer)] = std::move(value);
    return j;
  };
  expect_refused(with("/moe_router_activation_func", "softmax"), "moe_router_activation_func");
  expect_refused(with("/moe_renormalize", false), "moe_renormalize");
  expect_refused(with("/num_key_value_heads", 2), "num_key_value_heads");  // MLA
  expect_refused(with("/attention_bias", true), "attention_bias");
  expect_refused(with("/rope_scaling", {{"rope_type", "linear"}, {"factor", 2}}),
                 "rope_scaling.rope_type");
  expect_refused(with("/n_group", 3), "n_group");  // 8 experts
  expect_refused(with("/topk_group", 2), "topk_group");
  expect_refused(with("/hidden_act", "gelu"), "hidden_act");
  expect_refused(with("/attn_res_block_size", -1), "attn_res_block_size");
  expect_refused(with("/kv_lora_rank", -8), "kv_lora_rank");
  expect_refused(with("/linear_attn_config/head_dim", 0), "linear_attn_config.head_dim");
  expect_refused(with("/linear_attn_config/short_conv_kernel_size", 0),
                 "linear_attn_config.short_conv_kernel_size");
  expect_refused(with("/num_experts_per_token", 17), "num_experts_per_token");
  expect_refused(with("/num_shared_experts", -1), "num_shared_experts");
  expect_refused(with("/routed_scaling_factor", 0), "routed_scaling_factor");
  expect_refused(with("/bos_token_id", -7), "bos_token_id");
  expect_refused(with("/ignore_index", 5), "ignore_index");
  expect_refused(with("/eos_token_id", int64_t{1} << 32), "eos_token_id");  // not an int32
  expect_refused(with("/linear_attn_config/kda_layers/0", 0), "linear_attn_config.kda_layers");
}

TEST(ModelConfigRanges, HugeSizesAreRefusedBeforeAnythingIsBuilt) {
  K3_SKIP_WITHOUT_SHARED("reference/kimi-k3/config.json", "the released K3 config");
  const json k3 = read_json(testing::shared_dir() + "/reference/kimi-k3/config.json");
  auto with = [&](const char* field, int64_t value) {
    json j = k3;
    j["text_config"][field] = value;
    return j;
  };
  const auto start = std::chrono::steady_clock::now();
  expect_refused(with("num_experts", 1'000'000'000), "num_experts");
  expect_refused(with("num_hidden_layers", 10'000'000), "num_hidden_layers");
  expect_refused(with("vocab_size", int64_t{1} << 40), "vocab_size");
  expect_refused(with("hidden_size", int64_t{1} << 31), "hidden_size");
  expect_refused(with("num_attention_heads", 1 << 20), "num_attention_heads");
  expect_refused(with("moe_intermediate_size", int64_t{1} << 30), "moe_intermediate_size");
  // Each size within its bound, their product not: 4096 experts in each of 93 layers.
  expect_refused(with("num_experts", 4096), "num_experts");
  // Refused before anything is sized: the refusals take milliseconds, where allocating any of
  // these models would take minutes or fail. The bound only separates the two, on any machine.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

}  // namespace
}  // namespace k3::model
