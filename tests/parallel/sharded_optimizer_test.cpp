// ShardedOptimizer against the one-process optim::Optimizer. The tests named ShardedOptimizerMpi
// run on every rank of the job: a world of one when run plainly, 2, 3 and 4 ranks from the ctest
// entries labelled "mpi" (tests/CMakeLists.txt).
#include "k3/parallel/zero/sharded_optimizer.h"

#include <unordered_map>

#include "parallel/zero_fixture.h"

namespace k3::parallel {
namespace {

using testing::bitwise_equal;
using testing::kGradScale;
using testing::kLr;
using testing::Reference;
using testing::Tensors;

constexpr size_t kSmallBuckets = 64, kMidBuckets = 200;  // floats; 0: one bucket

// A ShardedOptimizer over `t` on a grid of data parallelism alone, fed gradients as its ZeRO
// stage expects them.
struct Sharded {
  ShardLayout layout;
  ShardedOptimizer opt;
  int zero;
  Sharded(Tensors& t, const dist::ProcessGrid& grid, int zero_stage, size_t bucket_floats)
      : layout(t.layout(grid.dp().size(), grid.dp().rank(), bucket_floats)),
        opt(t.set(), t.plan(), optim::OptimizerConfig{}, layout, grid, zero_stage),
        zero(zero_stage) {}
  void steps(Tensors& t, int first, int count) {
    testing::run_steps(first, count, [&](int s) {
      t.set_gradient(s, zero == 2 ? &layout : nullptr);
      opt.step(kLr, kGradScale);
    });
  }
};

// Every tensor's values equal the reference's bit for bit.
void expect_same_values(const Tensors& got, const Tensors& want, const std::string& what) {
  for (auto kind :
       {optim::OptimizerKind::adamw, optim::OptimizerKind::muon, optim::OptimizerKind::frozen})
    EXPECT_TRUE(bitwise_equal(got.values_of(kind), want.values_of(kind)))
        << what << ": " << optim::optimizer_name(kind) << " tensors differ";
}

std::string case_name(int zero, size_t buckets, const dist::Comm& dp) {
  return "zero " + std::to_string(zero) + ", buckets of " + std::to_string(buckets) + ", rank " +
         std::to_string(dp.rank()) + " of " + std::to_string(dp.size());
}

TEST(ShardedOptimizer, OneRankEqualsTheOptimizerBitForBit) {
  Reference ref;
  ref.steps(0, 4);
  for (int zero : {0, 1, 2})
    for (size_t buckets : {size_t{0}, kSmallBuckets}) {
      Tensors t;
      Sharded s(t, dist::single_process(), zero, buckets);
      s.steps(t, 0, 4);
      expect_same_values(t, ref.t, case_name(zero, buckets, dist::Comm()));
      EXPECT_EQ(s.opt.steps_taken(), 4);
      EXPECT_EQ(s.opt.summary(), ref.opt.summary());
    }
}

TEST(ShardedOptimizer, RejectsABadStageOrALayoutForAnotherGroup) {
  Tensors t;
  const ShardLayout two = t.layout(2, 0, 0);
  EXPECT_NE(k3::testing::error_of([&] {
              ShardedOptimizer(t.set(), t.plan(), {}, t.layout(1, 0, 0), dist::single_process(), 3);
            }).find("ZeRO stage 3"),
            std::string::npos);
  EXPECT_NE(k3::testing::error_of([&] {
              ShardedOptimizer(t.set(), t.plan(), {}, two, dist::single_process(), 1);
            }).find("rank 0 of 2"),
            std::string::npos);
}

// Zero 1 and 2 on the job's ranks, several bucket sizes (blocks cut by piece bounds in
// different places): every rank ends with the one-process values, bit for bit.
dist::ProcessGrid data_parallel_grid(const dist::Comm& world) {
  return dist::ProcessGrid(dist::ParallelDims{.dp = world.size()}, world);
}

TEST(ShardedOptimizerMpi, EqualsTheOneProcessOptimizer) {
  const dist::Comm world = dist::Comm::world();
  const dist::ProcessGrid grid = data_parallel_grid(world);
  Reference ref;
  ref.steps(0, 4);
  for (int zero : {1, 2})
    for (size_t buckets : {size_t{0}, kSmallBuckets, kMidBuckets}) {
      Tensors t;
      Sharded s(t, grid, zero, buckets);
      s.steps(t, 0, 4);
      expect_same_values(t, ref.t, case_name(zero, buckets, world));
      std::vector<float> first = t.values;  // rank 0's values
      dist::Comm(world).broadcast(first.data(), static_cast<int64_t>(first.size()), 0);
      EXPECT_TRUE(bitwise_equal(t.values, first)) << case_name(zero, buckets, world);
    }
}

std::unordered_map<std::string, const Tensor*> by_name(
    const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::unordered_map<std::string, const Tensor*> out;
  for (const auto& [name, t] : tensors) out[name] = &t;
  return out;
}

// The gathered state is the one-process optimizer's, tensor for tensor; restored into another
// stage and layout on the same ranks, into one rank alone, and into optim::Optimizer, it carries
// on exactly as the uninterrupted run.
TEST(ShardedOptimizerMpi, GatheredStateRestoresUnderAnyLayout) {
  const dist::Comm world = dist::Comm::world();
  const dist::ProcessGrid grid = data_parallel_grid(world);
  Reference ref;
  ref.steps(0, 3);
  Tensors ta;
  Sharded a(ta, grid, 1, kSmallBuckets);
  a.steps(ta, 0, 3);
  const auto state = a.opt.gather_state();
  const auto want = ref.opt.state_tensors();
  ASSERT_EQ(state.size(), want.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(state[i].first, want[i].first);
    EXPECT_EQ(state[i].second.shape(), want[i].second.shape()) << want[i].first;
    const float* got = state[i].second.f32();
    EXPECT_TRUE(
        bitwise_equal({got, got + state[i].second.numel()},
                      {want[i].second.f32(), want[i].second.f32() + want[i].second.numel()}))
        << want[i].first;
  }
  const auto saved = by_name(state);
  auto find = [&](const std::string& name) -> const Tensor* {
    auto it = saved.find(name);
    return it == saved.end() ? nullptr : it->second;
  };

  Tensors tb, tc, td;
  for (Tensors* t : {&tb, &tc, &td}) t->values = ta.values;
  Sharded b(tb, grid, 2, kMidBuckets), c(tc, dist::single_process(), 1, 0);
  optim::Optimizer d(td.set(), td.plan(), optim::OptimizerConfig{});
  for (Sharded* s : {&b, &c}) {
    s->opt.restore_state(find);
    s->opt.set_steps_taken(a.opt.steps_taken());
  }
  for (const auto& [name, view] : d.state_tensors())
    std::memcpy(view.data(), find(name)->data(), view.nbytes());
  d.set_steps_taken(a.opt.steps_taken());

  ref.steps(3, 2);
  a.steps(ta, 3, 2);
  b.steps(tb, 3, 2);
  c.steps(tc, 3, 2);
  testing::run_steps(3, 2, [&](int s) {
    td.set_gradient(s);
    d.step(kLr, kGradScale);
  });
  expect_same_values(ta, ref.t, "uninterrupted");
  expect_same_values(tb, ref.t, "restored under zero 2, another layout");
  expect_same_values(tc, ref.t, "restored on one rank");
  expect_same_values(td, ref.t, "restored into optim::Optimizer");
}

TEST(ShardedOptimizer, RestoreNamesAMissingOrMisshapenTensor) {
  Tensors t;
  Sharded s(t, dist::single_process(), 1, kSmallBuckets);
  const auto state = s.opt.gather_state();
  const auto saved = by_name(state);
  const std::string missing = "momentum.experts";
  const std::string message = k3::testing::error_of([&] {
    s.opt.restore_state([&](const std::string& name) -> const Tensor* {
      return name == missing ? nullptr : saved.at(name);
    });
  });
  EXPECT_NE(message.find("momentum.experts"), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;

  const Tensor wrong = Tensor::zeros({12, 40});
  const std::string shape = k3::testing::error_of([&] {
    s.opt.restore_state([&](const std::string& name) -> const Tensor* {
      return name == "exp_avg.embed" ? &wrong : saved.at(name);
    });
  });
  EXPECT_NE(shape.find("exp_avg.embed"), std::string::npos) << shape;
  EXPECT_NE(shape.find("[12, 40]"), std::string::npos) << shape;
  EXPECT_NE(shape.find("[40, 12]"), std::string::npos) << shape;
}

// This rank's state: 2·4 bytes per owned AdamW element plus 4 per element of the Muon blocks it
// owns; summed over the ranks, the one-process total (which zero 0 holds on every rank).
TEST(ShardedOptimizerMpi, StateBytesFollowTheZeroFormula) {
  const dist::Comm world = dist::Comm::world();
  const dist::ProcessGrid grid = data_parallel_grid(world);
  Tensors t;
  int64_t adamw_total = 0, muon_total = 0;
  for (const Tensors::Spec& s : t.specs) {
    if (s.kind == optim::OptimizerKind::adamw) adamw_total += shape_numel(s.shape);
    if (s.kind == optim::OptimizerKind::muon) muon_total += shape_numel(s.shape);
  }
  const int64_t one_process = 8 * adamw_total + 4 * muon_total;
  EXPECT_EQ(Sharded(t, grid, 0, kSmallBuckets).opt.state_bytes(), one_process);
  for (int zero : {1, 2}) {
    Sharded s(t, grid, zero, kSmallBuckets);
    int64_t adamw_owned = 0, muon_owned = 0;
    const optim::ParamSet set = t.set();
    for (size_t i = 0; i < t.specs.size(); ++i) {
      if (t.specs[i].kind != optim::OptimizerKind::adamw) continue;
      const size_t lo = set.slots[i].offset, hi = lo + static_cast<size_t>(set.slots[i].numel());
      for (FlatRange r : s.layout.owned())
        adamw_owned += static_cast<int64_t>(std::max(lo, std::min(hi, r.end)) -
                                            std::max(lo, std::min(hi, r.begin)));
    }
    const DistributedMuon& muon = *s.opt.distributed_muon();
    for (size_t u = 0; u < muon.units().size(); ++u)
      if (muon.owners()[u] == world.rank()) muon_owned += muon.units()[u].numel();
    const int64_t bytes = s.opt.state_bytes();
    EXPECT_EQ(bytes, 8 * adamw_owned + 4 * muon_owned) << case_name(zero, kSmallBuckets, world);
    int64_t sum = bytes;
    dist::Comm(world).all_reduce(&sum, 1);
    EXPECT_EQ(sum, one_process);
  }
}

}  // namespace
}  // namespace k3::parallel
