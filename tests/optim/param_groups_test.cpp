#include "k3/optim/param_groups.h"

#include <fstream>
#include <map>

#include "common/k3_weights.h"
#include "common/test_util.h"
#include "k3/base/error.h"

namespace k3::optim {
namespace {

bool is_kda_layer(int l) { return (l + 1) % 4 != 0 && l != 92; }  // weights.tsv's header

// The text-model tensors of the released K3 checkpoint, {l} expanded for a few layers of each
// kind (0: KDA + dense MLP, 1: KDA + MoE, 3 and 92: MLA) and {e} for the first and last expert.
std::vector<ParamSlot> k3_inventory() {
  const std::string path = testing::shared_dir() + "/reference/kimi-k3/weights.tsv";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<ParamSlot> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# Vision tower", 0) == 0) break;  // not part of the text model
    if (!testing::is_tensor_row(line)) continue;
    const std::vector<std::string> col = testing::split_row(line);
    const std::string &name = col[0], &layers = col[1], &shape = col[2];
    for (int l : {0, 1, 3, 92}) {
      const bool present = layers == "-" || layers == "0-92" ||
                           (layers == "KDA" && is_kda_layer(l)) ||
                           (layers == "MLA" && !is_kda_layer(l)) ||
                           (layers.rfind("1-92", 0) == 0 && l >= 1) || (layers == "0" && l == 0);
      if (!present) continue;
      for (int e : {0, 895}) {
        const std::string expanded = testing::replace(
            testing::replace(name, "{l}", std::to_string(l)), "{e}", std::to_string(e));
        out.push_back({expanded, testing::parse_shape(shape), 0});
        if (name.find("{e}") == std::string::npos) break;
      }
      if (name.find("{l}") == std::string::npos) break;
    }
  }
  return out;
}

// K3's sizes; the MLA value head is made 64 (K3: 128) so a KDA g_proj (128-row heads) and an MLA
// g_proj (64-row heads) tell apart whether `attn` found each layer's kind.
constexpr HeadSizes kK3Sizes{128, 192, 256, 64, 0};

const Assignment& find(const std::vector<Assignment>& plan, const std::string& name) {
  for (const Assignment& a : plan)
    if (a.name == name) return a;
  throw Error("no assignment for " + name);
}

TEST(ParamGroups, EveryK3TensorIsAssigned) {
  K3_SKIP_WITHOUT_SHARED("reference/kimi-k3/weights.tsv", "the released K3 tensor list");
  const std::vector<ParamSlot> inventory = k3_inventory();
  ASSERT_GT(inventory.size(), 100u);
  const std::vector<Assignment> plan = assign_param_groups(inventory, kK3Sizes);
  ASSERT_EQ(plan.size(), inventory.size());
  std::map<OptimizerKind, int> count;
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].name, inventory[i].name);
    ++count[plan[i].optimizer];
  }
  EXPECT_GT(count[OptimizerKind::muon], 0);
  EXPECT_GT(count[OptimizerKind::adamw], 0);

  auto expect = [&](const std::string& name, OptimizerKind kind, MuonGrouping grouping, Shape block,
                    int64_t blocks) {
    const Assignment& a = find(plan, name);
    EXPECT_EQ(a.optimizer, kind) << name << ": " << a.describe();
    if (kind != OptimizerKind::muon) return;
    EXPECT_EQ(a.grouping, grouping) << name;
    EXPECT_EQ(a.block_shape, block) << name;
    EXPECT_EQ(a.blocks(), blocks) << name;
    EXPECT_TRUE(a.weight_decay) << name;
  };
  using K = OptimizerKind;
  using G = MuonGrouping;
  const std::string kda = "model.layers.1.", mla = "model.layers.3.";
  for (const char* p : {"q_proj", "k_proj", "v_proj", "g_proj"})
    expect(kda + "self_attn." + p + ".weight", K::muon, G::per_head, {128, 7168}, 96);
  expect(kda + "self_attn.f_b_proj.weight", K::muon, G::per_head, {128, 128}, 96);
  expect(mla + "self_attn.g_proj.weight", K::muon, G::per_head, {64, 7168}, 192);
  expect(mla + "self_attn.q_b_proj.weight", K::muon, G::per_head, {192, 1536}, 96);
  expect(mla + "self_attn.kv_b_proj.weight", K::muon, G::per_head, {256, 512}, 96);
  expect(kda + "block_sparse_moe.experts.895.w2.weight_packed", K::muon, G::per_expert,
         {3584, 1536}, 1);
  for (const char* p :
       {"self_attn.f_a_proj", "self_attn.o_proj", "block_sparse_moe.gate",
        "block_sparse_moe.shared_experts.down_proj", "block_sparse_moe.routed_expert_up_proj"})
    expect(kda + p + ".weight", K::muon, G::whole, find(plan, kda + p + ".weight").shape, 1);
  expect(mla + "self_attn.q_a_proj.weight", K::muon, G::whole, {1536, 7168}, 1);
  expect(mla + "self_attn.kv_a_proj_with_mqa.weight", K::muon, G::whole, {576, 7168}, 1);
  expect("model.layers.0.mlp.down_proj.weight", K::muon, G::whole, {7168, 33792}, 1);
  for (const char* p :
       {"self_attn.b_proj.weight", "self_attn.A_log", "self_attn.dt_bias",
        "self_attn.q_conv1d.weight", "self_attn.o_norm.weight", "input_layernorm.weight",
        "mlp_res_proj.weight", "self_attention_res_norm.weight",
        "block_sparse_moe.routed_expert_norm.weight"})
    expect(kda + p, K::adamw, G::whole, {}, 0);
  for (const char* p :
       {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
        "model.output_attn_res_proj.weight", "model.layers.3.self_attn.kv_a_layernorm.weight"})
    expect(p, K::adamw, G::whole, {}, 0);
  expect(kda + "block_sparse_moe.gate.e_score_correction_bias", K::frozen, G::whole, {}, 0);
  expect(kda + "block_sparse_moe.experts.0.w1.weight_scale", K::frozen, G::whole, {}, 0);

  // Weight decay: matrices yes (the output head included), vectors and the embedding no.
  EXPECT_TRUE(find(plan, "lm_head.weight").weight_decay);
  EXPECT_TRUE(find(plan, kda + "self_attn.b_proj.weight").weight_decay);
  for (const char* p :
       {"model.embed_tokens.weight", "model.norm.weight", "model.output_attn_res_proj.weight"})
    EXPECT_FALSE(find(plan, p).weight_decay) << p;
}

// k3lab's dense model: the plain gated attention splits q/k/v/g by its head_dim.
TEST(ParamGroups, DenseModelUsesItsHeadDim) {
  const std::vector<ParamSlot> dense = {{"model.layers.0.self_attn.q_proj.weight", {64, 64}, 0},
                                        {"model.layers.0.self_attn.g_proj.weight", {64, 64}, 0},
                                        {"model.layers.0.self_attn.o_proj.weight", {64, 64}, 0},
                                        {"model.layers.0.mlp.up_proj.weight", {160, 64}, 0}};
  const auto plan = assign_param_groups(dense, HeadSizes{.dense = 16});
  EXPECT_EQ(plan[0].block_shape, (Shape{16, 64}));
  EXPECT_EQ(plan[1].blocks(), 4);
  EXPECT_EQ(plan[2].grouping, MuonGrouping::whole);
  EXPECT_EQ(plan[3].describe(), "muon [160, 64], decay");
  EXPECT_EQ(plan[0].describe(), "muon per-head 4 x [16, 64], decay");
}

// train.muon_per_head = false (the K2-style optimizer): every tensor the defaults split into heads
// is orthogonalized whole; everything else keeps its default group.
TEST(ParamGroups, WholeMatrixRulesUndoEveryPerHeadSplit) {
  std::vector<ParamSlot> params;
  for (const char* p : {"q_proj", "k_proj", "v_proj", "g_proj", "f_b_proj", "o_proj", "b_proj"})
    params.push_back({std::string("model.layers.1.self_attn.") + p + ".weight", {256, 64}, 0});
  for (const char* p : {"q_b_proj", "kv_b_proj", "g_proj"})  // an MLA layer
    params.push_back({std::string("model.layers.3.self_attn.") + p + ".weight", {256, 64}, 0});
  params.push_back({"model.layers.1.block_sparse_moe.experts.0.w1.weight", {32, 64}, 0});
  const HeadSizes sizes{16, 32, 64, 16, 16};
  const auto per_head = assign_param_groups(params, sizes);
  const auto whole = assign_param_groups(params, sizes, whole_matrix_muon_rules());
  int split = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    split += per_head[i].grouping == MuonGrouping::per_head;
    EXPECT_NE(whole[i].grouping, MuonGrouping::per_head) << params[i].name;
    if (per_head[i].grouping == MuonGrouping::per_head) {
      EXPECT_EQ(whole[i].optimizer, OptimizerKind::muon) << params[i].name;
      EXPECT_EQ(whole[i].block_shape, params[i].shape) << params[i].name;
    } else {
      EXPECT_EQ(whole[i].describe(), per_head[i].describe()) << params[i].name;
    }
  }
  EXPECT_EQ(split, 8);  // KDA's q, k, v, g, f_b; MLA's q_b, kv_b, g
}

void expect_error(const std::vector<ParamSlot>& params, const std::vector<std::string>& rules,
                  const std::string& mention) {
  try {
    assign_param_groups(params, kK3Sizes, rules);
    ADD_FAILURE() << "expected an error mentioning " << mention;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
  }
}

TEST(ParamGroups, UnknownTensorIsAnErrorNamingIt) {
  expect_error({{"model.layers.0.mystery.weight", {4, 4}, 0}}, {}, "model.layers.0.mystery.weight");
}

TEST(ParamGroups, RunRulesOverrideAndExtendTheDefaults) {
  const std::vector<ParamSlot> params = {{"model.layers.0.self_attn.q_proj.weight", {256, 64}, 0},
                                         {"model.layers.0.self_attn.k_proj.weight", {256, 64}, 0},
                                         {"model.layers.0.adapter.weight", {32, 64}, 0},
                                         {"model.layers.0.gate_stack.weight", {4, 8, 16}, 0}};
  const auto plan =
      assign_param_groups(params, kK3Sizes,
                          {"*.q_proj.weight = adamw", "*.k_proj.weight=muon:per_head(32)",
                           "*.adapter.weight=muon", "*.gate_stack.weight=muon:per_expert"});
  EXPECT_EQ(plan[0].optimizer, OptimizerKind::adamw);
  EXPECT_EQ(plan[0].rule, "*.q_proj.weight = adamw");
  EXPECT_EQ(plan[1].block_shape, (Shape{32, 64}));
  EXPECT_EQ(plan[2].grouping, MuonGrouping::whole);
  EXPECT_EQ(plan[3].block_rows, 8);
  EXPECT_EQ(plan[3].blocks(), 4);
}

// Names that differ only in their numbers (layers, experts) match the same patterns without
// digits; patterns with digits tell them apart, unless an earlier rule matches them all.
TEST(ParamGroups, RulesThatNameNumbersTellNamesApartByThem) {
  std::vector<ParamSlot> params;
  for (const char* layer : {"1", "12", "2", "21"})
    params.push_back({std::string("model.layers.") + layer + ".mlp.up_proj.weight", {8, 8}, 0});
  for (const Assignment& a : assign_param_groups(params, kK3Sizes))
    EXPECT_EQ(a.optimizer, OptimizerKind::muon) << a.name;
  const auto plan =
      assign_param_groups(params, kK3Sizes, {"model.layers.1.*=adamw", "*2.mlp.*=frozen"});
  EXPECT_EQ(plan[0].optimizer, OptimizerKind::adamw);   // layer 1
  EXPECT_EQ(plan[1].optimizer, OptimizerKind::frozen);  // 12
  EXPECT_EQ(plan[2].optimizer, OptimizerKind::frozen);  // 2
  EXPECT_EQ(plan[3].optimizer, OptimizerKind::muon);    // 21
  for (const Assignment& a :
       assign_param_groups(params, kK3Sizes, {"*.up_proj.weight=frozen", "*2.mlp.*=adamw"}))
    EXPECT_EQ(a.optimizer, OptimizerKind::frozen) << a.name;
}

TEST(ParamGroups, BadRulesAreErrorsNamingThem) {
  const std::vector<ParamSlot> norm = {{"model.norm.weight", {64}, 0}};
  expect_error(norm, {"model.norm.weight"}, "pattern=spec");
  expect_error(norm, {"model.norm.weight=sgd"}, "unknown optimizer \"sgd\"");
  expect_error(norm, {"model.norm.weight=muon:per_head(heads)"}, "per_head(heads)");
  expect_error(norm, {"model.norm.weight=muon"}, "Muon needs a matrix");
  const std::vector<ParamSlot> proj = {{"model.layers.0.self_attn.q_proj.weight", {100, 64}, 0}};
  expect_error(proj, {"*q_proj.weight=muon:per_head(32)"}, "do not tile");
  expect_error(proj, {}, "the head size dense is not set");
  expect_error({{"model.proj.weight", {8, 8}, 0}}, {"model.proj.weight=muon:per_head(attn)"},
               "self_attn tensors only");
}

}  // namespace
}  // namespace k3::optim
