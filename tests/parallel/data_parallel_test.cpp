// Data parallelism against the single-process run of the same global batch, on k3-nano (KDA,
// gated MLA, LatentMoE, Attention Residuals): under mpirun -np 2 and 4 (tests/CMakeLists.txt),
// for ZeRO 0, 1 and 2 and for AdamW and Muon. Each rank also computes the single-process run
// itself (a model on the grid of one process), so every comparison is local.
//
// Tolerances (fp32; the ranks' partial sums are added in another order than one process adds
// them): first-step loss 1e-6 relative, every gradient 1e-5 of the tensor's largest entry. Then
// ten steps, each taken from the one-process run's parameters and optimizer state
// (parallel/trainee.h): each loss 1e-6 relative, each tensor's update within 1e-2 of its size
// (‖Δ update‖ / ‖update‖; measured: 1.3e-4, most of it where AdamW's 1/√v turns the rounding of
// a near-zero gradient into a whole update); a lost or doubled bucket moves an update by its own
// size. After them every rank holds the same parameters, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/tp_util.h"
#include "parallel/trainee.h"

namespace k3::parallel::data_parallel_test {
namespace {

using model::Model;
using model::TokenBatch;

using k3::testing::max_rel_error;
using testing::GlobalBatch;
using testing::kRows;
using testing::nano;
using testing::Setup;
using testing::Trainee;

std::string name(const ::testing::TestParamInfo<Setup>& p) {
  return std::string(p.param.optimizer) + "_zero" + std::to_string(p.param.zero);
}

class DataParallelMatchesOneProcess : public ::testing::TestWithParam<Setup> {
 protected:
  dist::Comm world = dist::Comm::world();
  dist::ProcessGrid grid{dist::ParallelDims{.dp = world.size()}, world};
};

TEST_P(DataParallelMatchesOneProcess, FirstStepLossAndEveryGradient) {
  Trainee ref(dist::single_process(), GetParam()), dp(grid, GetParam());
  const GlobalBatch batch(ref.model.config(), 0);
  const StepTotals want = ref.step(batch, false), got = dp.step(batch, false);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-5 * want.grad_norm);
  const model::ParamRegistry &r = ref.model.params(), &p = dp.model.params();
  // Under ZeRO-2 a rank holds only its pieces of the reduced gradient.
  const std::vector<FlatRange> held =
      GetParam().zero == 2 ? dp.dp.layout().owned() : std::vector<FlatRange>{{0, p.flat_size()}};
  double worst = 0;
  for (int i = 0; i < p.size(); ++i) {
    const model::ParamInfo& info = p.info(i);
    for (const FlatRange& h : held) {
      const size_t lo = std::max(h.begin, info.offset),
                   hi = std::min(h.end, info.offset + static_cast<size_t>(info.numel()));
      if (lo >= hi) continue;
      const double e = max_rel_error(p.grads() + lo, r.grads() + lo, static_cast<int64_t>(hi - lo));
      EXPECT_LT(e, 1e-5) << info.name;
      worst = std::max(worst, e);
    }
  }
  if (world.rank() == 0) std::printf("max relative gradient error: %.3g\n", worst);
}

// Ten steps, each from the one-process run's parameters and optimizer state (trainee.h).
TEST_P(DataParallelMatchesOneProcess, TenStepsEachFromTheOneProcessState) {
  Trainee ref(dist::single_process(), GetParam()), dp(grid, GetParam());
  double worst_loss = 0, worst_update = 0;
  for (int step = 0; step < 10; ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    const double loss =
        testing::step_from(ref, dp, GlobalBatch(ref.model.config(), step), 1e-2, worst_update);
    EXPECT_LT(loss, 1e-6);
    worst_loss = std::max(worst_loss, loss);
  }
  if (world.rank() == 0)
    std::printf("10 steps: losses within %.2g relative, updates within %.3g\n", worst_loss,
                worst_update);
  // Every rank holds the same parameters, bit for bit.
  const model::ParamRegistry& p = dp.model.params();
  std::vector<float> lead(p.values(), p.values() + p.flat_size());
  world.broadcast(lead.data(), static_cast<int64_t>(lead.size()), 0);
  EXPECT_EQ(std::memcmp(lead.data(), p.values(), lead.size() * sizeof(float)), 0);
}

// The bytes one step moves over dp equal the analytic count, operation by operation (payloads
// as dist/comm.h defines them; F = the flat buffer's floats, padding included):
//   token count 8 B + loss 8 B (all-reduces over the ranks with their own tokens, the replica
//   group: here the same ranks as dp), ZeRO-2's norm 8 B,
//   gradients 4F (all-reduce, or reduce-scatter under ZeRO-2),
//   ZeRO 1 and 2: parameters 4F (all-gather) + distributed Muon's point-to-point pieces.
TEST_P(DataParallelMatchesOneProcess, BytesPerStepEqualTheAnalyticCount) {
  Trainee dp(grid, GetParam());
  const auto both = [&] {  // dp's counters plus the replica group's
    dist::Counters c = grid.dp().counters();
    for (size_t op = 0; op < c.ops.size(); ++op)
      c.ops[op].bytes += grid.replica().counters().ops[op].bytes;
    return c;
  };
  const dist::Counters before = both();
  dp.step(GlobalBatch(dp.model.config(), 0), true);
  const dist::Counters after = both();
  auto moved = [&](dist::Op op) { return after[op].bytes - before[op].bytes; };
  const int zero = GetParam().zero;
  const int64_t F = static_cast<int64_t>(dp.model.params().flat_size());
  const int64_t scalars = world.size() > 1 ? 8 * (zero == 2 ? 3 : 2) : 0;
  const int64_t grads = world.size() > 1 ? 4 * F : 0;
  const DistributedMuon* muon = dp.dp.optimizer().distributed_muon();
  const int64_t p2p = muon ? muon->expected_p2p_bytes() : 0;
  EXPECT_EQ(moved(dist::Op::all_reduce), scalars + (zero == 2 ? 0 : grads));
  EXPECT_EQ(moved(dist::Op::reduce_scatter), zero == 2 ? grads : 0);
  EXPECT_EQ(moved(dist::Op::all_gather), zero >= 1 ? grads : 0);
  EXPECT_EQ(moved(dist::Op::send) + moved(dist::Op::recv), p2p);
  EXPECT_EQ(after.bytes() - before.bytes(), scalars + grads * (zero >= 1 ? 2 : 1) + p2p);
  if (world.rank() == 0)
    std::printf("bytes per step, rank 0: %lld (F = %lld floats, Muon point-to-point %lld)\n",
                static_cast<long long>(after.bytes() - before.bytes()), static_cast<long long>(F),
                static_cast<long long>(p2p));
}

// Overlap: each bucket's reduction starts inside the backward, as soon as its gradients are
// final, not after it; the last bucket (the embedding's) starts with the backward's last report.
TEST(GradSync, StartsEachBucketDuringTheBackward) {
  const dist::Comm world = dist::Comm::world();
  const dist::ProcessGrid grid{dist::ParallelDims{.dp = world.size()}, world};
  Model m(nano(), true, grid);
  m.initialize(7);
  const ShardLayout layout(m.params(), world.size(), world.rank(), 20000);
  ASSERT_GE(layout.buckets().size(), 4u);
  GradSync sync(m.params(), layout, grid.dp(), grid.tp(), grid.ep(), grid.cp(), 0, true);
  const GlobalBatch batch(m.config(), 0);
  const std::vector<TokenBatch> share =
      batch.share(world.rank() * (kRows / world.size()), kRows / world.size());
  Arena arena(size_t{256} << 20, false);
  activation::ActivationManager acts;
  const model::GradsFinal hook = sync.begin();
  std::vector<int64_t> started;  // buckets started at each report
  auto reports = [&](int first, int end) {
    hook(first, end);
    started.push_back(grid.dp().counters()[dist::Op::all_reduce].calls);
  };
  const int64_t before = grid.dp().counters()[dist::Op::all_reduce].calls;
  m.forward_backward(arena, acts, share[0], 1e-3f, reports);
  sync.finish();
  const int64_t n = static_cast<int64_t>(layout.buckets().size());
  ASSERT_GT(started.size(), 3u);
  EXPECT_GT(started[started.size() / 2] - before, 0) << "nothing started halfway through";
  EXPECT_LT(started[started.size() / 2] - before, n) << "everything started halfway through";
  EXPECT_EQ(started.back() - before, n) << "a bucket waited for finish()";
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataParallelMatchesOneProcess,
                         ::testing::Values(Setup{0, "adamw"}, Setup{1, "adamw"}, Setup{2, "adamw"},
                                           Setup{0, "muon"}, Setup{1, "muon"}, Setup{2, "muon"}),
                         name);

}  // namespace
}  // namespace k3::parallel::data_parallel_test
