// The trainer's step: a step skipped for a non-finite loss applies nothing. Neither the optimizer
// nor the MoE router bias moves, and the skipped forward's routing counts do not reach the next
// update: skipping a step and then taking one leaves the model exactly as taking that step alone.
#include "k3/train/loop/step_engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

struct Rows {
  std::vector<int32_t> tokens, targets;
};

// Two rows of 16 random tokens; with IGNORED every target is the ignore index, so the step counts
// no token and its loss is 0 / 0 (NaN), while the forward still routes every token.
Rows rows(const model::ModelConfig& c, unsigned seed, bool ignored) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
  Rows r;
  for (int i = 0; i < 32; ++i) {
    r.tokens.push_back(tok(rng));
    r.targets.push_back(ignored ? static_cast<int32_t>(c.ignore_index) : tok(rng));
  }
  return r;
}

struct Trainee {
  std::unique_ptr<Session> s;
  std::unique_ptr<StepEngine> engine;
  explicit Trainee(const model::ModelConfig& mc) {
    RunConfig config;
    config.train.batch_size = 2;
    config.data.seq_len = 16;
    s = open_session(config, mc);
    s->model->initialize(7);
    engine = std::make_unique<StepEngine>(*s, dist::single_process(), [](const std::string&) {});
  }
  StepResult step(int64_t i, const Rows& r) {
    const model::TokenBatch b{r.tokens.data(), r.targets.data(), 2, 16};
    return engine->step(i, std::span<const model::TokenBatch>(&b, 1));
  }
  std::vector<float> values() const {
    const model::ParamRegistry& p = s->model->params();
    return {p.values(), p.values() + p.flat_size()};
  }
};

TEST(StepEngine, ASkippedStepMovesNeitherWeightsNorRouterBias) {
  const model::ModelConfig mc =
      model::load_model_config(testing::source_dir() + "/configs/k3-nano.json");
  ASSERT_GT(mc.num_experts, 0);
  Trainee skipping(mc), direct(mc);
  const std::vector<float> before = skipping.values();

  const StepResult skipped = skipping.step(0, rows(mc, 1, /*ignored=*/true));
  EXPECT_FALSE(skipped.applied);
  EXPECT_TRUE(std::isnan(skipped.loss));
  EXPECT_TRUE(skipped.expert_load.empty());
  EXPECT_EQ(skipping.engine->guard().skipped(), 1);
  EXPECT_EQ(skipping.values(), before) << "a skipped step changed a weight or a router bias";

  // The next step's update must see only its own routing counts.
  const Rows next = rows(mc, 2, /*ignored=*/false);
  const StepResult a = skipping.step(1, next), b = direct.step(1, next);
  ASSERT_TRUE(a.applied && b.applied);
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_FALSE(a.expert_load.empty());
  EXPECT_EQ(a.expert_load.begin()->second.tokens, b.expert_load.begin()->second.tokens);
  EXPECT_EQ(skipping.values(), direct.values());
}

}  // namespace
}  // namespace k3::train
