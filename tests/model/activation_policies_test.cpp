// The activation manager's policies on the K3 model (KDA, gated MLA, LatentMoE, Attention
// Residuals) and on the dense model (gated attention, GLU MLP): recompute and offload, at either
// granularity and chosen per tensor class, give the losses and gradients of keep bit for bit and
// record the expert statistics once; fp8 storage stays within a stated tolerance; budget mode
// fits its budget and refuses one that cannot be met, naming the least that works.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/model_util.h"
#include "common/test_util.h"
#include "k3/activation/budget.h"
#include "k3/base/error.h"
#include "k3/model/model.h"

namespace k3::model {
namespace {

using activation::Granularity;
using activation::Policy;
using activation::PolicyRules;

ModelConfig config(const std::string& name) {
  return load_model_config(testing::source_dir() + "/configs/" + name);
}

struct Policies {
  std::string rules;  // PolicyRules::parse text
  Policy fallback = Policy::Keep;
  Granularity granularity = Granularity::Sublayer;
};

struct Outcome {
  std::vector<double> losses;
  std::vector<float> grads;             // after the last step's backward
  std::vector<float> balancer;          // Quantile Balancing ranges after end_global_batch
  std::vector<int64_t> routed;          // tokens routed and each expert's load, every MoE layer
  size_t arena_peak = 0;                // of the last step
  activation::ManagerStats stats;       // of the last step
  std::vector<activation::SegmentProfile> profile;
};

// `steps` forward/backward passes of one batch of B=2 rows of T=32 tokens (the same weights:
// only the gradients and the statistics are compared), each followed by end_global_batch.
Outcome run(const ModelConfig& c, const Policies& setup, int steps = 1) {
  Model model(c);
  model.initialize(3);
  testing::perturb_attn_res(model);
  testing::spread_routers(model);
  Arena arena(size_t{64} << 20, false);
  activation::ActivationManager acts;
  acts.configure(PolicyRules(setup.fallback, PolicyRules::parse(setup.rules, "rules")),
                 setup.granularity);
  const int64_t B = 2, T = 32;
  const std::vector<int32_t> tokens = testing::random_tokens(B * T, 259, 11),
                             targets = testing::random_tokens(B * T, 259, 12);
  Outcome out;
  for (int s = 0; s < steps; ++s) {
    model.params().zero_grads();
    acts.reset_stats();
    arena.reset_peak();
    out.losses.push_back(
        model.forward_backward(arena, acts, {tokens.data(), targets.data(), B, T}, 1.f / 64).sum);
    out.arena_peak = arena.peak();
    out.stats = acts.stats();
    for (const auto& [layer, st] : model.end_global_batch()) {
      out.routed.push_back(st.tokens);
      out.routed.insert(out.routed.end(), st.load.begin(), st.load.end());
    }
  }
  const ParamRegistry& p = model.params();
  out.grads.assign(p.grads(), p.grads() + p.flat_size());
  for (const auto& [name, t] : model.balancer_state())
    out.balancer.insert(out.balancer.end(), t.f32(), t.f32() + t.numel());
  out.profile = acts.profile();
  EXPECT_EQ(acts.count(), 0u);
  EXPECT_EQ(acts.stored_bytes(), 0u);  // every pool buffer came back
  return out;
}

// activation.peak_bytes: the arena's peak and the pool's.
size_t peak(const Outcome& o) { return o.arena_peak + o.stats.stored_peak; }

size_t held_bytes(const Outcome& o, Policy p) {
  size_t n = 0;
  for (const auto& [name, c] : o.stats.classes) n += c.bytes[static_cast<size_t>(p)];
  return n;
}

void expect_bit_identical(const Outcome& got, const Outcome& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) EXPECT_EQ(got.losses[i], want.losses[i]) << what;
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_EQ(std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float)), 0)
      << what;
  ASSERT_EQ(got.balancer.size(), want.balancer.size());
  EXPECT_EQ(std::memcmp(got.balancer.data(), want.balancer.data(),
                        got.balancer.size() * sizeof(float)),
            0)
      << what;
  EXPECT_EQ(got.routed, want.routed) << what << ": the expert statistics were recorded again by a recompute";
}

TEST(ActivationPolicies, RecomputeAndOffloadMatchKeepBitForBit) {
  for (const char* model : {"k3-nano.json", "dense-tiny.json"}) {
    const ModelConfig c = config(model);
    const Outcome keep = run(c, {}, 2);
    EXPECT_GT(held_bytes(keep, Policy::Keep), 0u);
    const std::vector<std::pair<std::string, Policies>> setups = {
        {"recompute, sublayer", {"", Policy::Recompute, Granularity::Sublayer}},
        {"recompute, layer", {"", Policy::Recompute, Granularity::Layer}},
        {"offload", {"", Policy::Offload, Granularity::Sublayer}},
        {"offload, layer", {"", Policy::Offload, Granularity::Layer}},
        {"selective: feed-forwards recomputed, MLA offloaded",
         {"*.*.mlp.*=recompute, *.*.block_sparse_moe.*=recompute, mla.*.self_attn.*=offload",
          Policy::Keep, Granularity::Sublayer}},
        {"keep at layer granularity", {"", Policy::Keep, Granularity::Layer}},
    };
    for (const auto& [name, setup] : setups) {
      const Outcome got = run(c, setup, 2);
      expect_bit_identical(got, keep, std::string(model) + ", " + name);
      if (setup.fallback != Policy::Keep) {
        EXPECT_GT(held_bytes(got, setup.fallback), 0u) << name;
      }
      // With 8 layers, holding one or two layers' tensors at a time is less than all of them.
      if (setup.fallback != Policy::Keep && c.num_hidden_layers == 8) {
        EXPECT_LT(peak(got), peak(keep)) << name;
      }
    }
  }
}

// Two micro-batches in flight (as a pipeline holds them): offloaded and recomputed tensors of
// each come back to its own backward, in either order.
TEST(ActivationPolicies, MicroBatchesInFlightComeBackToTheirOwnBackward) {
  const ModelConfig c = config("k3-nano.json");
  auto grads = [&](Policy p, bool second_first) {
    Model model(c);
    model.initialize(3);
    testing::perturb_attn_res(model);
    ArenaRegions regions(size_t{32} << 20, 2);
    activation::ActivationManager acts;
    acts.configure(PolicyRules(p, {}));
    const int64_t B = 2, T = 16;
    std::vector<int32_t> tokens[2], targets[2];
    for (int m = 0; m < 2; ++m) {
      tokens[m] = testing::random_tokens(B * T, 259, 30 + m);
      targets[m] = testing::random_tokens(B * T, 259, 40 + m);
    }
    model.params().zero_grads();
    const Stage all = model.whole();
    for (int m = 0; m < 2; ++m)
      model.forward_stage({m, regions[m], acts}, all, {tokens[m].data(), targets[m].data(), B, T},
                          0.5f, nullptr, nullptr);
    for (int i = 0; i < 2; ++i) {
      const int m = second_first ? 1 - i : i;
      model.backward_stage({m, regions[m], acts}, all, {tokens[m].data(), targets[m].data(), B, T},
                           nullptr, nullptr);
    }
    const ParamRegistry& pr = model.params();
    return std::vector<float>(pr.grads(), pr.grads() + pr.flat_size());
  };
  for (bool second_first : {false, true}) {
    const std::vector<float> keep = grads(Policy::Keep, second_first);
    for (Policy p : {Policy::Offload, Policy::Recompute}) {
      const std::vector<float> got = grads(p, second_first);
      EXPECT_EQ(std::memcmp(got.data(), keep.data(), keep.size() * sizeof(float)), 0)
          << activation::policy_name(p) << (second_first ? ", second first" : "");
    }
  }
}

// fp8 and bf16 storage change only what the backward reads: the loss is the same, and the
// gradient stays within each one's tolerance of keep's (relative L2 over all parameters).
// Measured: fp8 0.071 (E4M3 keeps 3 mantissa bits, a relative step of 1/16, and this small random
// model passes the roundings of many tensors into every gradient); bf16 0.0035 (1 or 2 threads,
// native or ONEDNN_MAX_CPU_ISA=AVX2).
TEST(ActivationPolicies, LossyStorageStaysWithinItsTolerance) {
  const ModelConfig c = config("k3-nano.json");
  const Outcome keep = run(c, {});
  for (const auto& [policy, tolerance] : {std::pair{Policy::Fp8, 0.10}, {Policy::Bf16, 0.01}}) {
    const Outcome got = run(c, {"", policy, Granularity::Sublayer});
    const char* name = activation::policy_name(policy);
    EXPECT_EQ(got.losses[0], keep.losses[0]) << name;
    EXPECT_GT(held_bytes(got, policy), 0u) << name;
    EXPECT_LT(peak(got), peak(keep)) << name;
    double err = 0, norm = 0;
    for (size_t j = 0; j < keep.grads.size(); ++j) {
      const double d = got.grads[j] - keep.grads[j];
      err += d * d;
      norm += static_cast<double>(keep.grads[j]) * keep.grads[j];
    }
    EXPECT_LT(std::sqrt(err / norm), tolerance) << name;
    EXPECT_GT(std::sqrt(err / norm), 0.0) << name << ": the tensors really were rounded";
  }
}

// Under keep every segment stays in the arena: nothing is copied into the pool, and the step's
// peak is what the recompute profile's arena peak plus the held segments predict, as budget mode
// and the next step's prediction assume (activation/budget.h).
TEST(ActivationPolicies, KeptSegmentsStayInTheArenaUncopied) {
  const ModelConfig c = config("k3-nano.json");
  const Outcome keep = run(c, {});
  EXPECT_EQ(keep.stats.stored_peak, 0u);
  EXPECT_EQ(keep.stats.keep_seconds, 0.0);
  const size_t held = activation::held_in_arena(keep.profile, PolicyRules{});
  EXPECT_GE(held, held_bytes(keep, Policy::Keep));  // the tensors and the segments' own scratch
  const Outcome profile = run(c, {"", Policy::Recompute, Granularity::Sublayer});
  const activation::StepCosts costs{profile.arena_peak, 10e9, 1};
  EXPECT_EQ(activation::predict(keep.profile, PolicyRules{}, costs).peak, keep.arena_peak);
  std::printf("keep: arena peak %zu bytes, %zu of them held segments (%zu of kept tensors); "
              "everything recomputed: %zu\n",
              keep.arena_peak, held, held_bytes(keep, Policy::Keep), profile.arena_peak);
}

// Budget mode: a profile with every segment recomputed, then plans for budgets from the least
// that works up to what keep needs; each run stays within its budget (arena peak + pool peak,
// measured), matches keep bit for bit, and is predicted within 5%.
TEST(ActivationPolicies, BudgetsAreMetAndTooSmallOnesRefused) {
  const ModelConfig c = config("k3-nano.json");
  const Outcome keep = run(c, {});
  const Outcome profile = run(c, {"", Policy::Recompute, Granularity::Sublayer});
  const activation::StepCosts costs{profile.arena_peak, 10e9, 1};
  const size_t keep_peak = keep.arena_peak + keep.stats.stored_peak;
  const size_t least =
      activation::predict(profile.profile, PolicyRules(Policy::Recompute, {}), costs).peak;
  ASSERT_LT(least, keep_peak);
  for (double f : {0.0, 0.3, 0.6, 0.9, 1.0}) {
    const size_t budget = least + static_cast<size_t>(f * static_cast<double>(keep_peak - least));
    const activation::BudgetPlan plan = activation::plan_budget(profile.profile, {}, costs, budget);
    ASSERT_LE(plan.prediction.peak, budget);
    std::string rules;
    for (const auto& r : plan.rules.rules())
      rules += r.pattern + "=" + activation::policy_name(r.policy) + ",";
    const Outcome got = run(c, {rules, Policy::Keep, Granularity::Sublayer});
    const size_t measured = got.arena_peak + got.stats.stored_peak;
    EXPECT_LE(measured, budget) << "budget fraction " << f;
    EXPECT_NEAR(static_cast<double>(plan.prediction.peak), static_cast<double>(measured),
                0.05 * static_cast<double>(measured))
        << f;
    expect_bit_identical(got, keep, "budget fraction " + std::to_string(f));
    if (f == 1.0) {
      EXPECT_EQ(plan.segments_recomputed + plan.segments_offloaded, 0);
    }
    if (f == 0.0) {
      EXPECT_GT(plan.segments_recomputed + plan.segments_offloaded, 0);
    }
  }
  const std::string message = testing::error_of(
      [&] { activation::plan_budget(profile.profile, {}, costs, least - 1); });
  EXPECT_NE(message.find("activation.budget"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(least) + " bytes"), std::string::npos) << message;
}

}  // namespace
}  // namespace k3::model
