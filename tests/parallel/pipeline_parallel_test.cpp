// Pipeline parallelism of the whole model (k3-nano: 8 layers, Attention Residuals blocks of 3, so
// stage boundaries fall inside blocks and the payload carries bank snapshots), alone and with data,
// tensor and expert parallelism, against the single-process run of the same global batch: pp2
// (1F1B, GPipe and ZB-H1, even and uneven splits) under mpirun -np 2; pp4 (1F1B and ZB-H1),
// pp2 × vp2 (interleaved), pp2 × dp2, pp2 × tp2 and pp2 × ep2 under -np 4. Four micro-batches a
// step. ZB-H1 is also compared with 1F1B bit for bit, and the multimodal model (k3-nano-vision)
// with its vision tower as filler nodes with one process.
//
// Tolerances as in the other parallel tests: loss 1e-6 relative, gradient norm 1e-5, every
// gradient 1e-4 of its tensor's largest entry; three steps from the one-process state, losses
// 1e-6 and updates 3e-2 of their size.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "k3/model/context/zigzag.h"
#include "parallel/trainee.h"

namespace k3::parallel::pipeline_parallel_test {
namespace {

using pipeline::ScheduleKind;
using testing::GlobalBatch;
using testing::kRows;
using testing::Setup;
using testing::Trainee;

constexpr int kMicroBatches = 4;

struct Layout {
  int pp, vp, dp, tp;
  ScheduleKind schedule;
  Setup setup;
  std::vector<int64_t> layers = {};  // per virtual stage; empty: even
  int ep = 1, cp = 1;
};

std::string name(const ::testing::TestParamInfo<Layout>& p) {
  const Layout& l = p.param;
  std::string s = "pp" + std::to_string(l.pp);
  if (l.vp > 1) s += "_vp" + std::to_string(l.vp);
  if (l.dp > 1) s += "_dp" + std::to_string(l.dp);
  if (l.tp > 1) s += "_tp" + std::to_string(l.tp);
  if (l.ep > 1) s += "_ep" + std::to_string(l.ep);
  if (l.cp > 1) s += "_cp" + std::to_string(l.cp);
  s += std::string("_") + pipeline::schedule_kind_name(l.schedule);
  for (int64_t n : l.layers) s += '_' + std::to_string(n);
  return s + "_" + l.setup.optimizer + "_zero" + std::to_string(l.setup.zero);
}

class PipelineParallelMatchesOneProcess : public ::testing::TestWithParam<Layout> {
 protected:
  void SetUp() override {
    const Layout& l = GetParam();
    if (world.size() != l.pp * l.dp * l.tp * l.ep * l.cp)
      GTEST_SKIP() << "runs on " << l.pp * l.dp * l.tp * l.ep * l.cp << " ranks";
    grid = std::make_unique<dist::ProcessGrid>(
        dist::ParallelDims{.tp = l.tp, .cp = l.cp, .ep = l.ep, .dp = l.dp, .pp = l.pp}, world);
    ref = std::make_unique<Trainee>(dist::single_process(), l.setup);
    testing::Setup s = l.setup;
    s.schedule = l.schedule;
    s.split =
        model::PipelineSplit::make(ref->model.config().num_hidden_layers, l.pp, l.vp, l.layers);
    run = std::make_unique<Trainee>(*grid, s);
  }
  std::string what() const { return name(::testing::TestParamInfo<Layout>(GetParam(), 0)); }

  dist::Comm world = dist::Comm::world();
  std::unique_ptr<dist::ProcessGrid> grid;
  std::unique_ptr<Trainee> ref, run;
};

TEST_P(PipelineParallelMatchesOneProcess, FirstStepLossAndEveryGradient) {
  const auto [loss, worst] = testing::expect_step_matches(
      *ref, *run, GlobalBatch(ref->model.config(), 0, testing::kT, kRows, {}, kMicroBatches),
      GetParam().setup.zero);
  // Each rank holds only its stages' tensors: the embedding on the first, the head on the last.
  const model::ParamRegistry& p = run->model.params();
  const int pp_rank = grid->coord().pp;
  EXPECT_EQ(p.info(p.find("model.embed_tokens.weight")).held(), pp_rank == 0);
  EXPECT_EQ(p.info(p.find("lm_head.weight")).held(), pp_rank == GetParam().pp - 1);
  if (world.rank() == 0)
    std::printf("%s: loss %.2g relative, max gradient error %.3g\n", what().c_str(), loss, worst);
}

TEST_P(PipelineParallelMatchesOneProcess, ThreeStepsEachFromTheOneProcessState) {
  testing::expect_steps_from(*ref, *run, 3, testing::kT, what(), kRows, {}, kMicroBatches);
}

TEST_P(PipelineParallelMatchesOneProcess, EvaluationLoss) {
  const GlobalBatch b(ref->model.config(), 5, testing::kT, kRows);
  const model::TokenBatch batch = b.share(0, kRows)[0];
  const kernels::LossSum want = ref->model.forward_loss(ref->arena, batch);
  // Under context parallelism each cp rank scores its chunks of every row; the sums add up.
  const dist::Comm& cp = grid->cp();
  std::vector<int32_t> mine;
  kernels::LossSum got = run->model.forward_loss(
      run->arena, model::context_share(batch, cp.size(), cp.rank(), mine));
  cp.all_reduce(&got.sum, 1);
  cp.all_reduce(&got.count, 1);
  EXPECT_EQ(got.count, want.count);
  // The same arithmetic stage after stage; tensor parallelism sums partial products in its order,
  // expert parallelism runs each expert's rows in products of other shapes, and context
  // parallelism attends in chunks.
  const Layout& l = GetParam();
  EXPECT_NEAR(got.sum, want.sum, l.tp > 1 || l.ep > 1 || l.cp > 1 ? 1e-6 * want.sum : 0.0);
}

std::vector<Layout> layouts() {
  const Setup adamw0{0, "adamw"}, muon1{1, "muon"}, adamw2{2, "adamw"};
  return {
      {2, 1, 1, 1, ScheduleKind::one_f_one_b, adamw0},
      {2, 1, 1, 1, ScheduleKind::one_f_one_b, muon1},
      {2, 1, 1, 1, ScheduleKind::gpipe, adamw0},
      {2, 1, 1, 1, ScheduleKind::zero_bubble, adamw0},
      {4, 1, 1, 1, ScheduleKind::zero_bubble, muon1},
      {2, 1, 1, 1, ScheduleKind::one_f_one_b, adamw0, {3, 5}},  // uneven, a block split
      {4, 1, 1, 1, ScheduleKind::one_f_one_b, muon1},
      {2, 2, 1, 1, ScheduleKind::interleaved, adamw0},
      {2, 2, 1, 1, ScheduleKind::interleaved, muon1, {1, 3, 2, 2}},
      {2, 1, 2, 1, ScheduleKind::one_f_one_b, adamw2},
      {2, 1, 2, 1, ScheduleKind::one_f_one_b, muon1},
      {2, 1, 1, 2, ScheduleKind::one_f_one_b, muon1},
      {2, 1, 1, 1, ScheduleKind::one_f_one_b, muon1, {}, 2},
      {2, 1, 1, 1, ScheduleKind::zero_bubble, adamw2, {}, 2},
      {2, 1, 1, 1, ScheduleKind::one_f_one_b, muon1, {}, 1, 2},
  };
}

INSTANTIATE_TEST_SUITE_P(PipelineParallel, PipelineParallelMatchesOneProcess,
                         ::testing::ValuesIn(layouts()), name);

// ZB-H1 runs the same arithmetic as 1F1B: the input-gradient halves in 1F1B's order and each
// deferred weight-gradient product later but in the order it was queued, so every gradient adds
// the same terms in the same order. Two steps on pp = every rank, compared bit for bit.
TEST(PipelineParallelZeroBubble, EqualsOneFOneBBitForBit) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() < 2) GTEST_SKIP() << "runs on 2 or more ranks";
  const dist::ProcessGrid grid(dist::ParallelDims{.pp = world.size()}, world);
  const model::ModelConfig c = testing::nano();
  testing::Setup s{0, "adamw"};
  s.split = model::PipelineSplit::make(c.num_hidden_layers, world.size(), 1, {});
  Trainee one_f_one_b(grid, s);
  s.schedule = ScheduleKind::zero_bubble;
  Trainee zb(grid, s);
  const model::ParamRegistry &a = one_f_one_b.model.params(), &b = zb.model.params();
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    const GlobalBatch batch(c, step, testing::kT, kRows, {}, kMicroBatches);
    const StepTotals want = one_f_one_b.step(batch, false), got = zb.step(batch, false);
    EXPECT_EQ(got.loss, want.loss);
    EXPECT_EQ(got.grad_norm, want.grad_norm);
    for (int i = 0; i < a.size(); ++i) {
      if (!a.info(i).held()) continue;
      EXPECT_EQ(0, std::memcmp(a.grad(i).f32(), b.grad(i).f32(),
                               sizeof(float) * static_cast<size_t>(a.info(i).local_numel())))
          << a.info(i).name;
    }
    one_f_one_b.dp.apply(2e-3f, 1.0f);
    zb.dp.apply(2e-3f, 1.0f);
  }
  for (int i = 0; i < a.size(); ++i) {
    if (!a.info(i).held()) continue;
    EXPECT_EQ(0, std::memcmp(a.value(i).f32(), b.value(i).f32(),
                             sizeof(float) * static_cast<size_t>(a.info(i).local_numel())))
        << a.info(i).name;
  }
  // The split was real: weight-gradient nodes ran, each after its input-gradient half.
  int weights = 0;
  for (const pipeline::NodeTime& t : zb.dp.measured())
    weights += t.node.op == pipeline::Op::backward_weight;
  EXPECT_EQ(weights, kMicroBatches);
}

// The multimodal model (k3-nano-vision): rows of the image-text corpus whose images' tokens take
// the places of the placeholders. One process runs the vision tower inside the first stage's
// forward; under pp = every rank (pp2, pp4) it runs as filler nodes in rank 0's bubbles, all
// before the pipeline, or inside the forward, under 1F1B and ZB-H1: the first step's loss and
// every gradient equal one process's, and three steps keep them together.
TEST(PipelineParallelVision, FillersMatchOneProcess) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() < 2) GTEST_SKIP() << "runs on 2 or more ranks";
  const dist::ProcessGrid grid(dist::ParallelDims{.pp = world.size()}, world);
  const model::ModelConfig c = model::load_model_config(k3::testing::source_dir() +
                                                        "/configs/k3-nano-vision.json");
  const int64_t T = 48;  // placeholders, then a caption cut short
  for (ScheduleKind kind : {ScheduleKind::one_f_one_b, ScheduleKind::zero_bubble})
    for (pipeline::Fillers fillers :
         {pipeline::Fillers::in_bubbles, pipeline::Fillers::before, pipeline::Fillers::none}) {
      const std::string what = std::string(pipeline::schedule_kind_name(kind)) + ", fillers " +
                               pipeline::fillers_name(fillers);
      SCOPED_TRACE(what);
      testing::Setup s{0, "adamw"};
      Trainee one(dist::single_process(), s, c);
      s.schedule = kind;
      s.fillers = fillers;
      s.split = model::PipelineSplit::make(c.num_hidden_layers, world.size(), 1, {});
      Trainee run(grid, s, c);
      const model::ParamRegistry &r = one.model.params(), &p = run.model.params();
      for (int step = 0; step < 3; ++step) {
        const testing::ImageTextBatch b(c, step, T, kRows, kMicroBatches);
        const StepTotals want = one.dp.forward_backward(one.arena, one.acts, b.share(0, kRows));
        const StepTotals got = run.dp.forward_backward(run.arena, run.acts, b.share(0, kRows));
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss) << "step " << step;
        double worst = 0;
        for (int i = 0; i < p.size(); ++i) {
          const model::ParamInfo& info = p.info(i);
          if (!info.held()) continue;
          const double e = k3::testing::max_rel_error(p.grad(i).f32(),
                                                      r.grad(r.find(info.name)).f32(),
                                                      info.local_numel());
          EXPECT_LT(e, 1e-4) << info.name << ", step " << step;
          worst = std::max(worst, e);
        }
        if (step == 0 && world.rank() == 0)
          std::printf("vision %s: loss %.3g relative, max gradient error %.3g\n", what.c_str(),
                      std::abs(got.loss - want.loss) / want.loss, worst);
        one.dp.apply(2e-3f, 1.0f);
        run.dp.apply(2e-3f, 1.0f);
      }
      // The tower's weights live with the embedding, on rank 0, where the fillers ran.
      EXPECT_EQ(p.info(p.find("mm_projector.proj.2.weight")).held(), grid.coord().pp == 0);
      int filler_nodes = 0;
      for (const pipeline::NodeTime& t : run.dp.measured())
        filler_nodes += t.node.op == pipeline::Op::filler;
      EXPECT_EQ(filler_nodes,
                grid.coord().pp == 0 && fillers != pipeline::Fillers::none ? kMicroBatches : 0);
    }
}

}  // namespace
}  // namespace k3::parallel::pipeline_parallel_test
