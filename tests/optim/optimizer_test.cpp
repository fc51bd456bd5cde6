#include "k3/optim/optimizer.h"

#include <cstring>

#include "common/test_util.h"
#include "k3/base/error.h"

namespace k3::optim::optimizer_test {
namespace {

using testing::random_vec;

// A small model's worth of parameters in one flat buffer, with K3 names.
struct Model {
  std::vector<float> values, grads;
  ParamSet params;
  Model() {
    const std::vector<std::pair<std::string, Shape>> tensors = {
        {"model.embed_tokens.weight", {50, 16}},
        {"model.layers.0.input_layernorm.weight", {16}},
        {"model.layers.0.self_attn.q_proj.weight", {32, 16}},
        {"model.layers.0.self_attn.o_proj.weight", {16, 32}},
        {"model.layers.0.block_sparse_moe.gate.e_score_correction_bias", {4}},
        {"model.layers.0.block_sparse_moe.experts.0.w1.weight", {24, 16}},
        {"model.layers.0.block_sparse_moe.experts.1.w1.weight", {24, 16}},
        {"lm_head.weight", {50, 16}}};
    size_t offset = 0;
    for (const auto& [name, shape] : tensors) {
      params.slots.push_back({name, shape, offset});
      offset += (static_cast<size_t>(shape_numel(shape)) + 15) / 16 * 16;  // aligned, with padding
    }
    values = random_vec(offset, 3);
    grads.assign(offset, 0.0f);
    params.values = values.data();
    params.grads = grads.data();
    params.flat_size = offset;
  }
  std::vector<Assignment> plan() const {
    return assign_param_groups(params.slots, HeadSizes{.dense = 8});
  }
  void draw_grads(uint64_t seed) {
    const auto g = random_vec(grads.size(), seed, -1, 1);
    std::copy(g.begin(), g.end(), grads.begin());
  }
  std::vector<float> tensor(const std::string& name) const {
    for (const ParamSlot& p : params.slots)
      if (p.name == name)
        return {values.begin() + static_cast<int64_t>(p.offset),
                values.begin() + static_cast<int64_t>(p.offset) + p.numel()};
    throw Error("no " + name);
  }
};

constexpr float kLr = 0.01f, kGradScale = 0.7f;

void run(Optimizer& opt, Model& m, int first_step, int steps) {
  for (int s = first_step; s < first_step + steps; ++s) {
    m.draw_grads(100 + static_cast<uint64_t>(s));
    opt.step(kLr, kGradScale);
  }
}

// Each parameter moves exactly as its own optimizer alone would move it; frozen ones stay.
TEST(Optimizer, UpdatesEachGroupWithItsOwnOptimizer) {
  Model m, alone;
  Optimizer opt(m.params, m.plan(), OptimizerConfig{});
  auto subset = [&](std::vector<std::string> names) {
    ParamSet s{{}, alone.values.data(), alone.grads.data(), alone.values.size()};
    for (const ParamSlot& p : alone.params.slots)
      if (std::find(names.begin(), names.end(), p.name) != names.end()) s.slots.push_back(p);
    return s;
  };
  const std::string l0 = "model.layers.0.";
  AdamW adamw(
      subset({"model.embed_tokens.weight", l0 + "input_layernorm.weight", "lm_head.weight"}),
      AdamWConfig{}, {false, false, true});
  Muon muon(subset({l0 + "self_attn.q_proj.weight", l0 + "self_attn.o_proj.weight",
                    l0 + "block_sparse_moe.experts.0.w1.weight",
                    l0 + "block_sparse_moe.experts.1.w1.weight"}),
            {8, 0, 0, 0}, MuonConfig{});
  const auto bias_before = m.tensor(l0 + "block_sparse_moe.gate.e_score_correction_bias");
  for (int s = 0; s < 3; ++s) {
    m.draw_grads(100 + static_cast<uint64_t>(s));
    alone.draw_grads(100 + static_cast<uint64_t>(s));
    opt.step(kLr, kGradScale);
    adamw.step(kLr, kGradScale);
    muon.step(kLr, kGradScale);
  }
  for (const ParamSlot& p : m.params.slots) {
    if (p.name.find("e_score_correction_bias") == std::string::npos) {
      EXPECT_EQ(m.tensor(p.name), alone.tensor(p.name)) << p.name;
    }
  }
  EXPECT_EQ(m.tensor(l0 + "block_sparse_moe.gate.e_score_correction_bias"), bias_before);
  EXPECT_EQ(opt.steps_taken(), 3);
  EXPECT_EQ(
      opt.summary(),
      "adamw 3 tensors (1616 values), muon 4 tensors (1792 values), frozen 1 tensors (4 values)");
}

// Save after 3 steps, restore into a fresh optimizer, continue: bit-identical to never stopping.
TEST(Optimizer, StateRoundTripsAndResumesBitIdentically) {
  Model straight, resumed;
  Optimizer a(straight.params, straight.plan(), OptimizerConfig{});
  run(a, straight, 0, 6);

  std::vector<float> saved_values;
  std::vector<std::pair<std::string, std::vector<float>>> saved_state;
  int64_t saved_steps = 0;
  {
    Optimizer b(resumed.params, resumed.plan(), OptimizerConfig{});
    run(b, resumed, 0, 3);
    saved_values = resumed.values;
    for (auto& [name, t] : b.state_tensors())
      saved_state.emplace_back(name, std::vector<float>(t.f32(), t.f32() + t.numel()));
    saved_steps = b.steps_taken();
  }
  // AdamW: exp_avg and exp_avg_sq of 3 tensors; Muon: momentum of 4; nothing for the frozen bias.
  ASSERT_EQ(saved_state.size(), 10u);
  std::copy(saved_values.begin(), saved_values.end(), resumed.values.begin());
  Optimizer c(resumed.params, resumed.plan(), OptimizerConfig{});
  const auto state = c.state_tensors();
  for (size_t i = 0; i < state.size(); ++i) {
    ASSERT_EQ(state[i].first, saved_state[i].first);
    std::memcpy(state[i].second.data(), saved_state[i].second.data(), state[i].second.nbytes());
  }
  c.set_steps_taken(saved_steps);
  run(c, resumed, 3, 3);
  EXPECT_EQ(resumed.values, straight.values);
  const auto final_a = a.state_tensors(), final_c = c.state_tensors();
  for (size_t i = 0; i < final_a.size(); ++i)
    EXPECT_EQ(0, std::memcmp(final_a[i].second.data(), final_c[i].second.data(),
                             final_a[i].second.nbytes()))
        << final_a[i].first;
}

TEST(Optimizer, EveryParameterNeedsAnAssignment) {
  Model m;
  auto plan = m.plan();
  plan.pop_back();
  EXPECT_THROW(Optimizer(m.params, plan, OptimizerConfig{}), Error);
}

TEST(AdamW, DecaysMatricesButNotVectorsOrTheEmbedding) {
  EXPECT_TRUE(decays_by_default({"lm_head.weight", {50, 16}, 0}));
  EXPECT_TRUE(decays_by_default({"model.layers.0.self_attn.q_conv1d.weight", {32, 1, 4}, 0}));
  EXPECT_FALSE(decays_by_default({"model.embed_tokens.weight", {50, 16}, 0}));
  EXPECT_FALSE(decays_by_default({"model.norm.weight", {16}, 0}));
  EXPECT_FALSE(decays_by_default({"model.output_attn_res_proj.weight", {1, 16}, 0}));
}

}  // namespace
}  // namespace k3::optim::optimizer_test
