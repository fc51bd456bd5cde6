// Expert parallelism (baseline all-to-all and MoonEP), alone and with data and tensor parallelism,
// against the single-process run of the same global batch, on k3-nano (8 routed experts, top 2,
// a shared expert): ep2 under mpirun -np 2; ep4, ep2 × dp2 and ep2 × tp2 under -np 4. Some
// layouts run k2-nano instead (the standard MoE, experts on x itself, with the bias balancer), and
// some the MoE ablations of k3-nano (common/ablations.h): the standard MoE under Quantile
// Balancing, and LatentMoE under the bias balancer. Each rank also runs the single-process model
// itself and compares what it holds.
//
// Routings: the model's own (routers spread, tests/common/model_util.h), and forced ones (the
// router bias, which only selects, set so that every token takes expert 0, or only the first
// ep rank's experts, or a Zipf-like preference). Under MoonEP every rank must then compute
// exactly S·K rows per micro-batch (S tokens a rank, top K); with no replica slots a skewed
// routing cannot be balanced, and the overflowing rank computes its extra rows itself.
//
// Tolerances (fp32; a rank's rows of an expert, or a replica's, are summed in another order than
// one process sums them): loss 1e-6 relative, gradient norm 1e-5, every gradient 1e-4 of its
// tensor's largest entry, the balancer's bias after its update 1e-5 (the counts are
// integers summed exactly; a token whose score moved across a histogram bin by rounding would
// show as one bin's width, 1e-3 of the range). Three steps from the one-process state: losses
// 1e-6, updates within 3e-2 of their size (as in the tensor-parallel tests).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/ablations.h"
#include "common/tp_util.h"
#include "parallel/trainee.h"

namespace k3::parallel::expert_parallel_test {
namespace {

using k3::testing::max_rel_error;
using k3::testing::shard_of;
using testing::GlobalBatch;
using testing::kMicro;
using testing::kRows;
using testing::kT;
using testing::Setup;
using testing::Trainee;

enum class Routing { natural, one_expert, one_rank, zipf };

struct Layout {
  int ep, dp, tp;
  bool moonep;
  int slots;
  Routing routing;
  Setup setup;
  const char* config = "k3-nano.json";
  const char* ablation = nullptr;  // of k3-nano (common/ablations.h)
};

const char* routing_name(Routing r) {
  switch (r) {
    case Routing::natural:
      return "natural";
    case Routing::one_expert:
      return "one_expert";
    case Routing::one_rank:
      return "one_rank";
    case Routing::zipf:
      return "zipf";
  }
  return "?";
}

std::string name(const ::testing::TestParamInfo<Layout>& p) {
  const Layout& l = p.param;
  std::string s = "ep" + std::to_string(l.ep);
  if (l.dp > 1) s += "_dp" + std::to_string(l.dp);
  if (l.tp > 1) s += "_tp" + std::to_string(l.tp);
  s += l.moonep ? "_moonep" + std::to_string(l.slots) : "_alltoall";
  s += std::string("_") + routing_name(l.routing) + "_" + l.setup.optimizer + "_zero" +
       std::to_string(l.setup.zero);
  if (l.ablation) return s + "_" + l.ablation;
  return std::string(l.config) == "k3-nano.json" ? s : s + "_k" + l.config[1];
}

// Sets every MoE layer's router bias so that the routing is the one asked for (the bias only
// selects experts; the routing weights still come from the scores).
void force_routing(model::Model& m, Routing r, int ep) {
  if (r == Routing::natural) return;
  model::ParamRegistry& p = m.params();
  const int64_t E = m.config().num_experts;
  for (int i = 0; i < p.size(); ++i) {
    if (!model::is_router_bias(p.info(i).name)) continue;
    float* b = p.value(i).f32();
    for (int64_t e = 0; e < E; ++e)
      b[e] = r == Routing::one_expert ? (e == 0 ? 50.f : 0.f)
             : r == Routing::one_rank ? (e < E / ep ? 50.f : 0.f)
                                      : -2.f * std::log(static_cast<float>(e + 1));
  }
}

class ExpertParallelMatchesOneProcess : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    const Layout& l = GetParam();
    if (world.size() != l.ep * l.dp * l.tp)
      GTEST_SKIP() << name(::testing::TestParamInfo<Layout>(l, 0)) << " runs on "
                   << l.ep * l.dp * l.tp << " ranks";
    grid = std::make_unique<dist::ProcessGrid>(
        dist::ParallelDims{
            .tp = l.tp, .ep = l.ep, .dp = l.dp, .moonep = l.moonep, .moonep_slots = l.slots},
        world);
    const model::ModelConfig c =
        l.ablation ? k3::testing::k3_nano_ablation(l.ablation)
                   : model::load_model_config(k3::testing::source_dir() + "/configs/" + l.config);
    ref = std::make_unique<Trainee>(dist::single_process(), l.setup, c);
    run = std::make_unique<Trainee>(*grid, l.setup, c);
    force_routing(ref->model, l.routing, l.ep);
    force_routing(run->model, l.routing, l.ep);
  }
  std::string what() const { return name(::testing::TestParamInfo<Layout>(GetParam(), 0)); }

  dist::Comm world = dist::Comm::world();
  std::unique_ptr<dist::ProcessGrid> grid;
  std::unique_ptr<Trainee> ref, run;
};

// One step: the loss, the norm, every gradient this rank holds; how many rows each rank computed;
// then the update and the balancer's bias after it (which must have moved).
TEST_P(ExpertParallelMatchesOneProcess, FirstStepEveryGradientAndTheBalancingBias) {
  const Layout& l = GetParam();
  const auto [loss, worst] =
      testing::expect_step_matches(*ref, *run, GlobalBatch(ref->model.config(), 0), l.setup.zero);
  const model::ParamRegistry &r = ref->model.params(), &p = run->model.params();

  // Rows per rank: S·K per micro-batch under a balanced MoonEP plan; the home experts' rows
  // under the baseline; every row somewhere either way.
  const int64_t SK = run->dp.rows(kRows) * kT * ref->model.config().num_experts_per_token;
  int64_t overflow = 0, replicas = 0;
  for (const auto& [layer, d] : run->model.take_dispatch_stats()) {
    int64_t rows = 0, home = 0;
    for (size_t q = 0; q < d.rows.size(); ++q) {
      rows += d.rows[q];
      home += d.home_rows[q];
      if (!l.moonep) {
        EXPECT_EQ(d.rows[q], d.home_rows[q]) << "layer " << layer;
      }
      if (l.moonep && d.overflow == 0) {
        EXPECT_EQ(d.rows[q], kMicro * SK) << "layer " << layer;
      }
    }
    EXPECT_EQ(rows, l.ep * kMicro * SK) << "layer " << layer << ": every row computed once";
    EXPECT_EQ(home, rows);
    overflow = std::max(overflow, d.overflow);
    replicas += d.replicas;
  }
  if (l.moonep && l.slots >= 2) {
    EXPECT_EQ(overflow, 0) << "two slots balance every routing here";
  }
  if (l.moonep && l.slots == 0 && l.routing != Routing::natural) {
    EXPECT_GT(overflow, 0) << "no slots: the skew stays";
  }

  ref->dp.apply(2e-3f, 1.0f);
  run->dp.apply(2e-3f, 1.0f);
  std::vector<std::vector<float>> before(static_cast<size_t>(r.size()));  // the one-process bias
  for (int i = 0; i < r.size(); ++i)
    if (model::is_router_bias(r.info(i).name))
      before[static_cast<size_t>(i)].assign(r.value(i).f32(), r.value(i).f32() + r.info(i).numel());
  ref->model.end_global_batch(ref->dp.count_reducer());
  run->model.end_global_batch(run->dp.count_reducer());
  double bias = 0, moved = 0;
  for (int i = 0; i < p.size(); ++i)
    if (model::is_router_bias(p.info(i).name)) {
      const int w = r.find(p.info(i).name);
      const float *a = p.value(i).f32(), *b = r.value(w).f32();
      for (int64_t e = 0; e < p.info(i).numel(); ++e) {
        bias = std::max(bias, static_cast<double>(std::abs(a[e] - b[e])));
        moved = std::max(moved, static_cast<double>(std::abs(b[e] - before[size_t(w)][size_t(e)])));
      }
    }
  EXPECT_LT(bias, 1e-5) << "the balancer's bias";
  EXPECT_GT(moved, 0) << "the balancer left the bias where it was";
  if (world.rank() == 0)
    std::printf(
        "%s: loss %.2g relative, max gradient error %.3g, bias %.2g; replicas %lld, overflow "
        "%lld\n",
        what().c_str(), loss, worst, bias, static_cast<long long>(replicas),
        static_cast<long long>(overflow));
}

TEST_P(ExpertParallelMatchesOneProcess, ThreeStepsEachFromTheOneProcessState) {
  testing::expect_steps_from(*ref, *run, 3, testing::kT, what());
}

std::vector<Layout> layouts() {
  const Setup adamw0{0, "adamw"}, muon1{1, "muon"}, adamw2{2, "adamw"};
  const Routing nat = Routing::natural;
  std::vector<Layout> out = {
      // 2 ranks
      {2, 1, 1, false, 0, nat, adamw0},
      {2, 1, 1, true, 2, nat, muon1},
      {2, 1, 1, true, 2, Routing::one_expert, adamw0},
      {2, 1, 1, true, 2, Routing::one_rank, muon1},
      {2, 1, 1, true, 2, Routing::zipf, adamw0},
      {2, 1, 1, true, 0, Routing::one_rank, adamw0},
      // 4 ranks
      {4, 1, 1, false, 0, nat, muon1},
      {4, 1, 1, true, 2, nat, adamw0},
      {4, 1, 1, true, 2, Routing::one_expert, muon1},
      {4, 1, 1, true, 2, Routing::one_rank, adamw0},
      {4, 1, 1, true, 2, Routing::zipf, muon1},
      {4, 1, 1, true, 0, Routing::one_expert, adamw0},
      {2, 2, 1, false, 0, nat, adamw2},
      {2, 2, 1, true, 2, Routing::one_rank, muon1},
      {2, 1, 2, false, 0, nat, adamw0},
      {2, 1, 2, true, 2, Routing::zipf, muon1},
      // k2-nano: 2 ranks, then ep4, ep2 × dp2 and ep2 × tp2
      {2, 1, 1, false, 0, nat, adamw0, "k2-nano.json"},
      {2, 1, 1, true, 2, Routing::one_rank, muon1, "k2-nano.json"},
      {4, 1, 1, true, 2, Routing::zipf, adamw0, "k2-nano.json"},
      {2, 2, 1, false, 0, nat, muon1, "k2-nano.json"},
      {2, 1, 2, false, 0, nat, adamw0, "k2-nano.json"},
      // k3-nano's MoE ablations: 2 ranks, then ep2 × tp2 and ep2 × dp2, on the model's own
      // routing (under a forced one the bias update can come out the same from each rank's own
      // counts, without their sum over ranks, which is what these rows check of the balancers).
      {2, 1, 1, true, 2, nat, muon1, "k3-nano.json", "standard_moe"},
      {2, 1, 2, false, 0, nat, adamw0, "k3-nano.json", "standard_moe"},
      {2, 1, 1, false, 0, nat, adamw0, "k3-nano.json", "bias_balancer"},
      {2, 2, 1, true, 2, nat, muon1, "k3-nano.json", "bias_balancer"},
  };
  return out;
}

// MoonEP against the baseline on the same routing (every token to the first rank's experts, so
// that most rows run on replicas): the same loss and gradients, to summation order.
TEST(ExpertParallelMoonEp, EqualsTheBaselineOnTheSameRouting) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() == 1) GTEST_SKIP() << "runs under mpirun";
  const dist::ProcessGrid base_grid(dist::ParallelDims{.ep = world.size()}, world),
      moon_grid(dist::ParallelDims{.ep = world.size(), .moonep = true, .moonep_slots = 2}, world);
  Trainee base(base_grid, {0, "adamw"}), moon(moon_grid, {0, "adamw"});
  force_routing(base.model, Routing::one_rank, world.size());
  force_routing(moon.model, Routing::one_rank, world.size());
  const GlobalBatch batch(base.model.config(), 0);
  const StepTotals a = base.step(batch, false), b = moon.step(batch, false);
  EXPECT_NEAR(b.loss, a.loss, 1e-7 * a.loss);
  double worst = 0;
  const model::ParamRegistry &p = base.model.params(), &q = moon.model.params();
  for (int i = 0; i < p.size(); ++i) {
    const double e = max_rel_error(q.grad(i).f32(), p.grad(i).f32(), p.info(i).local_numel());
    EXPECT_LT(e, 1e-5) << p.info(i).name;
    worst = std::max(worst, e);
  }
  int64_t replicas = 0;
  for (const auto& [layer, d] : moon.model.take_dispatch_stats()) replicas += d.replicas;
  EXPECT_GT(replicas, 0) << "the routing needs replicas";
  if (world.rank() == 0)
    std::printf(
        "ep%d MoonEP vs all-to-all: loss %.2g relative, max gradient error %.3g, %lld "
        "replicas\n",
        world.size(), std::abs(b.loss - a.loss) / a.loss, worst, static_cast<long long>(replicas));
}

INSTANTIATE_TEST_SUITE_P(ExpertParallel, ExpertParallelMatchesOneProcess,
                         ::testing::ValuesIn(layouts()), name);

}  // namespace
}  // namespace k3::parallel::expert_parallel_test
