// ShardedOptimizer on tensor-parallel shards against the one-process optim::Optimizer on the
// global tensors. The tests run on every rank of the job: tp1 alone in one process; tp2 and
// dp2 under mpirun -np 2; tp4, tp2×dp2 and dp4 under -np 4 (tests/CMakeLists.txt). Each rank
// holds its shards of a mix of row-split, column-split and replicated tensors, sliced by hand
// from the global values and gradients, and also runs the one-process reference itself.
//
// Tolerance: none. AdamW and the momentum are elementwise, the owner's Newton–Schulz input is
// the one-process block bit for bit, and Newton–Schulz gives a block the same result in any
// batch at a fixed thread count (the mpi tests run one thread), so every value is compared bit
// for bit after every step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "k3/dist/grid.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/zero/sharded_optimizer.h"
#include "parallel/zero_fixture.h"

namespace k3::parallel::tp_optimizer_test {
namespace {

using testing::kGradScale;
using testing::kLr;
using testing::Reference;
using testing::Tensors;
using K = optim::OptimizerKind;

// zero_fixture's kinds of block, each split as the model splits its kind; every split extent
// divides by 4.
std::vector<Tensors::Spec> tp_specs() {
  return {{"embed", {48, 12}, K::adamw, 0, false, 0},      // vocabulary split
          {"norm", {12}, K::adamw, 0, false},              // replicated
          {"q_proj", {24, 12}, K::muon, 6, true, 0},       // per head, heads split
          {"o_proj", {12, 24}, K::muon, 0, true, 1},       // whole, wide, input features split
          {"router_bias", {4}, K::frozen, 0, false},       //
          {"experts", {3, 10, 12}, K::muon, 10, true, 2},  // per expert, columns split
          {"down", {30, 8}, K::muon, 0, true, 1},          // whole, tall, columns split
          {"gate", {16, 12}, K::muon, 0, true, 0},         // whole, tall, rows split
          {"kv_proj", {20, 12}, K::muon, 5},               // per head, replicated
          {"q_a", {8, 12}, K::muon, 0},                    // whole, replicated
          {"wide_heads", {16, 12}, K::muon, 8, true, 0},   // heads of 8 rows: at tp4 on two ranks
          {"stack", {2, 8, 12}, K::muon, 0, true, 1},      // whole, a middle dimension split
          {"in_proj", {12, 16}, K::adamw, 0, true, 1},     // AdamW, columns split
          {"head_norm", {1, 12}, K::adamw, 0, false},      //
          {"lm_head", {48, 12}, K::adamw, 0, true, 0}};
}

// Tensor parameter i's local elements: the global flat index of each, in local order. By hand:
// the global tensor walked in order, keeping the elements whose coordinate along the split
// dimension lies in rank t's share.
std::vector<int64_t> shard_elements(const Tensors::Spec& s, int tp, int t) {
  std::vector<int64_t> out;
  int64_t stride = 1;
  for (size_t k = static_cast<size_t>(std::max(s.split, 0)) + 1; k < s.shape.size(); ++k)
    stride *= s.shape[k];
  for (int64_t e = 0; e < shape_numel(s.shape); ++e)
    if (s.split < 0 || (e / stride) % s.shape[static_cast<size_t>(s.split)] /
                               (s.shape[static_cast<size_t>(s.split)] / tp) ==
                           t)
      out.push_back(e);
  return out;
}

// Rank t of tp's shards of the global tensors: a registry placed there (allocated, so
// parallel::param_set gives its slots as it does a model's), filled from the global buffers.
struct Shards {
  const Tensors& global;
  model::ParamRegistry registry;
  std::vector<std::vector<int64_t>> elements;  // per tensor
  Shards(const Tensors& g, int tp, int t)
      : global(g), registry(model::GroupPlaces{{"tp", {tp, t}}}) {
    for (const Tensors::Spec& s : g.specs) {
      registry.add(s.name, s.shape, model::ParamInit::zeros(),
                   s.split >= 0 ? model::ShardSpec{s.split, "tp"} : model::ShardSpec{});
      elements.push_back(shard_elements(s, tp, t));
    }
    registry.allocate();
    slice(g.values, registry.values());
  }
  void slice(const std::vector<float>& from, float* to) const {
    for (int i = 0; i < registry.size(); ++i) {
      const float* g = from.data() + global.registry.info(i).offset;
      float* l = to + registry.info(i).offset;
      for (size_t k = 0; k < elements[static_cast<size_t>(i)].size(); ++k)
        l[k] = g[elements[static_cast<size_t>(i)][k]];
    }
  }
  std::vector<optim::Assignment> plan() const {
    std::vector<optim::Assignment> out = global.plan();
    for (int i = 0; i < registry.size(); ++i)
      out[static_cast<size_t>(i)].shape = registry.info(i).local_shape;
    return out;
  }
  // Step `step`'s reduced gradient: whole, or only in `layout`'s own pieces, the rest NaN.
  void set_gradient(int step, const ShardLayout* pieces_only) {
    float* g = registry.grads();
    slice(Tensors::gradient(global.registry.flat_size(), step), g);
    if (!pieces_only) return;
    std::vector<float> kept(g, g + registry.flat_size());
    std::fill(g, g + registry.flat_size(), std::numeric_limits<float>::quiet_NaN());
    for (FlatRange r : pieces_only->owned())
      std::copy(kept.begin() + static_cast<int64_t>(r.begin),
                kept.begin() + static_cast<int64_t>(r.end), g + r.begin);
  }
  // The largest |difference| between this rank's shards and the same slices of `want`.
  double max_error(const Tensors& want) const {
    std::vector<float> expected(registry.flat_size());
    slice(want.values, expected.data());
    double worst = 0;
    for (int i = 0; i < registry.size(); ++i)
      for (int64_t k = 0; k < registry.info(i).local_numel(); ++k) {
        const size_t at = registry.info(i).offset + static_cast<size_t>(k);
        const double e = std::abs(static_cast<double>(registry.values()[at]) - expected[at]);
        worst = std::max(worst, std::isnan(e) ? std::numeric_limits<double>::infinity() : e);
      }
    return worst;
  }
};

struct Layout {
  int tp, dp;
  std::string str() const { return "tp" + std::to_string(tp) + "×dp" + std::to_string(dp); }
};

// The layouts of this job's size.
std::vector<Layout> layouts(int n) {
  if (n == 4) return {{4, 1}, {2, 2}, {1, 4}};
  if (n == 2) return {{2, 1}, {1, 2}};
  return {{n, 1}};
}

// A layout's grid, this rank's shards and its optimizer.
struct OnGrid {
  dist::ProcessGrid grid;
  Shards shards;
  ShardLayout layout;
  ShardedOptimizer opt;
  int zero;
  OnGrid(const Tensors& g, Layout l, int zero_stage, size_t bucket_floats)
      : grid(dist::ParallelDims{.tp = l.tp, .dp = l.dp}, dist::Comm::world()),
        shards(g, l.tp, grid.tp().rank()),
        layout(shards.registry, l.dp, grid.dp().rank(), bucket_floats),
        opt(param_set(shards.registry), shards.plan(), optim::OptimizerConfig{}, layout, grid,
            zero_stage),
        zero(zero_stage) {}
  void step(int s) {
    shards.set_gradient(s, zero == 2 ? &layout : nullptr);
    opt.step(kLr, kGradScale);
  }
};

// The largest of every rank's value (the collectives sum: each rank fills its own slot).
double max_over_ranks(double mine) {
  const dist::Comm world = dist::Comm::world();
  std::vector<double> all(static_cast<size_t>(world.size()), 0.0);
  all[static_cast<size_t>(world.rank())] = mine;
  world.all_reduce(all.data(), static_cast<int64_t>(all.size()));
  return *std::max_element(all.begin(), all.end());
}

TEST(TensorParallelOptimizer, EqualsTheOneProcessOptimizerAfterEveryStep) {
  const int n = dist::Comm::world().size();
  for (const Layout& l : layouts(n))
    for (int zero : {0, 1, 2}) {
      double worst = 0;
      for (size_t buckets : {size_t{0}, size_t{64}, size_t{200}}) {
        Reference ref(tp_specs());
        OnGrid run(ref.t, l, zero, buckets);
        for (int s = 0; s < 4; ++s) {
          ref.steps(s, 1);
          run.step(s);
          const double e = run.shards.max_error(ref.t);
          EXPECT_EQ(e, 0.0) << l.str() << ", zero " << zero << ", buckets of " << buckets
                            << ", step " << s + 1 << ", rank " << dist::Comm::world().rank();
          worst = std::max(worst, e);
        }
      }
      worst = max_over_ranks(worst);
      if (dist::Comm::world().rank() == 0)
        std::printf("[tp optimizer] %s, zero %d: max |error| over 4 steps, 3 bucket sizes: %g\n",
                    l.str().c_str(), zero, worst);
    }
}

// Counters, the analytic count and, under ZeRO 0, a count from the tensors alone: every unit
// spanning tp moves, per dp replica, its gradient to the owner and X back for each part but the
// owner's (parts are equal here), each byte counted by both ends.
TEST(TensorParallelOptimizer, MuonBytesEqualTheAnalyticCount) {
  const int n = dist::Comm::world().size();
  for (const Layout& l : layouts(n))
    for (int zero : {0, 1, 2}) {
      Reference ref(tp_specs());
      OnGrid run(ref.t, l, zero, 64);
      run.step(0);
      const DistributedMuon* muon = run.opt.distributed_muon();
      if (!muon) continue;  // tp1, zero 0: the replicated optimizer
      const std::string what = l.str() + ", zero " + std::to_string(zero);
      const MuonTraffic traffic = run.opt.muon_traffic();
      EXPECT_EQ(traffic.p2p_bytes, muon->expected_p2p_bytes()) << what;
      EXPECT_EQ(traffic.p2p_bytes, muon_p2p_bytes(muon->units(), muon->owners(), l.tp, zero,
                                                  run.opt.state_group().rank()))
          << what;
      int64_t total = traffic.p2p_bytes, spanning = 0;
      dist::Comm::world().all_reduce(&total, 1);
      for (const MuonUnit& u : muon->units())
        if (u.spans_tp()) spanning += u.numel() - u.numel() / (u.tp_end - u.tp_first);
      if (zero == 0) {
        EXPECT_EQ(total, int64_t{l.dp} * 2 * 2 * 4 * spanning) << what;
      }
      if (n > 1) {
        EXPECT_GT(total, 0) << what;
      }
      if (dist::Comm::world().rank() == 0)
        std::printf(
            "[tp muon] %s, rank 0: p2p %lld B (analytic %lld B), unit buffer %lld B, X %lld B\n",
            what.c_str(), static_cast<long long>(traffic.p2p_bytes),
            static_cast<long long>(muon->expected_p2p_bytes()),
            static_cast<long long>(traffic.unit_buffer_bytes),
            static_cast<long long>(traffic.x_buffer_bytes));
    }
}

double ns_cost(const MuonUnit& u) {
  const double m = static_cast<double>(std::min(u.rows, u.cols)),
               n = static_cast<double>(std::max(u.rows, u.cols));
  return 2 * m * m * n + m * m * m;
}

// A K3-shaped layer at d = 512, split as the model splits it: every owner lies on one of its
// unit's tp coordinates, no rank's Newton–Schulz load exceeds another's by more than the largest
// unit, and every rank computes the same owners.
TEST(TensorParallelOptimizer, OwnersAreBalancedAndDeterministic) {
  const Tensors g({{"q_a", {384, 512}, K::muon, 0},                  // replicated
                   {"q_b", {8 * 64, 384}, K::muon, 64, true, 0},     // per head, heads split
                   {"kv_b", {8 * 128, 256}, K::muon, 128, true, 0},  //
                   {"o_proj", {512, 512}, K::muon, 0, true, 1},      // whole, columns split
                   {"gate", {1024, 512}, K::muon, 0, true, 0},       // whole, rows split
                   {"down", {512, 1024}, K::muon, 0, true, 1},       //
                   {"router", {16, 512}, K::muon, 0},                // replicated
                   {"w1", {8, 256, 512}, K::muon, 256, true, 1},     // experts, rows split
                   {"w2", {8, 512, 256}, K::muon, 512, true, 2}});   // experts, columns split
  const dist::Comm world = dist::Comm::world();
  for (const Layout& l : layouts(world.size())) {
    OnGrid run(g, l, 1, size_t{64} << 10);
    const DistributedMuon& muon = *run.opt.distributed_muon();
    const std::vector<int>& owners = muon.owners();
    std::vector<double> load(static_cast<size_t>(l.tp * l.dp), 0.0);
    double largest = 0;
    for (size_t u = 0; u < owners.size(); ++u) {
      const MuonUnit& unit = muon.units()[u];
      EXPECT_GE(owners[u] % l.tp, unit.tp_first) << l.str() << ", unit " << u;
      EXPECT_LT(owners[u] % l.tp, unit.tp_end) << l.str() << ", unit " << u;
      load[static_cast<size_t>(owners[u])] += ns_cost(unit);
      largest = std::max(largest, ns_cost(unit));
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, largest) << l.str();
    EXPECT_GT(*lo, 0.0) << l.str();
    EXPECT_EQ(owners, assign_unit_owners(muon.units(), l.tp, l.dp, 5)) << l.str();
    std::vector<int> first = owners;
    world.broadcast(first.data(), static_cast<int64_t>(first.size()), 0);
    EXPECT_EQ(owners, first) << l.str() << ", rank " << world.rank();
  }
}

// The count for one rank from the parameters (what the planner uses) equals the count over
// every rank's pieces of the units and owners DistributedMuon makes: every rank of tp × dp
// layouts (dp 3 and 5 cut buckets unevenly), buckets whole, tiny and mid-sized, ZeRO 0, 1, 2.
TEST(DistributedMuon, RankBytesEqualTheCountOverEveryPiece) {
  const Tensors g(tp_specs());
  int64_t nonzero = 0;
  for (int tp : {1, 2, 4}) {
    const Shards shards(g, tp, 0);  // the flat offsets are the same on every tp coordinate
    const optim::OptimizerParts parts =
        optim::split_by_optimizer(param_set(shards.registry), shards.plan());
    for (int dp : {1, 2, 3, 5})
      for (size_t buckets : {size_t{0}, size_t{7}, size_t{64}, size_t{200}})
        for (int zero : {0, 1, 2}) {
          const ShardLayout cut(shards.registry, dp, 0, buckets);
          const ShardLayout layout = zero == 0 ? cut.alone() : cut;
          const std::vector<MuonUnit> units = muon_units(parts.muon, parts.block_rows, layout, tp);
          const std::vector<int> owners = assign_unit_owners(units, tp, layout.ranks(), 5);
          for (int rank = 0; rank < tp * layout.ranks(); ++rank) {
            const int64_t want = muon_p2p_bytes(units, owners, tp, zero, rank);
            EXPECT_EQ(muon_p2p_bytes(parts.muon, parts.block_rows, layout, tp, zero, 5, rank), want)
                << "tp" << tp << "×dp" << dp << ", buckets of " << buckets << ", zero " << zero
                << ", rank " << rank;
            nonzero += want > 0;
          }
        }
  }
  EXPECT_GT(nonzero, 100);
}

std::unordered_map<std::string, Tensor> by_name(std::vector<std::pair<std::string, Tensor>> state) {
  std::unordered_map<std::string, Tensor> out;
  for (auto& [name, t] : state) out.emplace(name, std::move(t));
  return out;
}

// Over state_group() every element of every state tensor is held by exactly one rank.
void expect_held_once(const ShardedOptimizer& opt, const std::string& what) {
  for (const ShardedOptimizer::StateTensor& s : opt.state_parts()) {
    std::vector<int32_t> held(static_cast<size_t>(shape_numel(s.shape)), 0);
    for (const ShardedOptimizer::StatePart& p : s.parts)
      for (int64_t k = p.at; k < p.at + p.length; ++k) ++held[static_cast<size_t>(k)];
    opt.state_group().all_reduce(held.data(), static_cast<int64_t>(held.size()));
    EXPECT_TRUE(std::all_of(held.begin(), held.end(), [](int32_t c) { return c == 1; }))
        << what << ": " << s.name;
  }
}

// Saved under one layout, restored under others and in one process: the next steps equal the
// uninterrupted run's. Four ranks: tp2×dp2 ZeRO 2 → tp4 ZeRO 1, tp2×dp2 ZeRO 0, one process;
// two: tp2 ZeRO 2 → dp2 ZeRO 1, tp2 ZeRO 0, one process.
TEST(TensorParallelOptimizer, StateSavedUnderOneLayoutRestoresUnderAnother) {
  const int n = dist::Comm::world().size();
  const Layout saved_under = n == 4 ? Layout{2, 2} : Layout{n, 1};
  const Layout restored_under = n == 4 ? Layout{4, 1} : Layout{1, n};
  Reference ref(tp_specs());
  OnGrid a(ref.t, saved_under, 2, 64);
  for (int s = 0; s < 3; ++s) a.step(s);
  ref.steps(0, 3);
  expect_held_once(a.opt, saved_under.str() + ", zero 2");
  const auto want = ref.opt.state_tensors();
  auto state = a.opt.gather_state();
  ASSERT_EQ(state.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(state[i].first, want[i].first);
    ASSERT_EQ(state[i].second.shape(), want[i].second.shape()) << want[i].first;
    const float *got = state[i].second.f32(), *w = want[i].second.f32();
    EXPECT_TRUE(testing::bitwise_equal({got, got + want[i].second.numel()},
                                       {w, w + want[i].second.numel()}))
        << want[i].first;
    Tensor one = Tensor::empty(want[i].second.shape());
    a.opt.gather_state_into(i, one.f32());
    EXPECT_EQ(std::memcmp(one.data(), got, one.nbytes()), 0) << want[i].first;
  }
  const auto saved = by_name(std::move(state));
  auto find = [&](const std::string& name) -> const Tensor* {
    auto it = saved.find(name);
    return it == saved.end() ? nullptr : &it->second;
  };

  // Every run starts from a's values (global: the reference's, which a equals).
  Tensors tb(tp_specs()), tc(tp_specs()), td(tp_specs());
  for (Tensors* t : {&tb, &tc, &td}) t->values = ref.t.values;
  OnGrid b(tb, restored_under, 1, 200), c(tc, saved_under, 0, 0);
  optim::Optimizer d(td.set(), td.plan(), optim::OptimizerConfig{});
  for (OnGrid* r : {&b, &c}) {
    r->opt.restore_state(find);
    r->opt.set_steps_taken(a.opt.steps_taken());
    expect_held_once(r->opt, "restored");
  }
  for (const auto& [name, view] : d.state_tensors())
    std::memcpy(view.data(), find(name)->data(), view.nbytes());
  d.set_steps_taken(a.opt.steps_taken());

  for (int s = 3; s < 5; ++s) {
    ref.steps(s, 1);
    for (OnGrid* r : {&a, &b, &c}) r->step(s);
    td.set_gradient(s);
    d.step(kLr, kGradScale);
  }
  EXPECT_EQ(a.shards.max_error(ref.t), 0.0) << "uninterrupted";
  EXPECT_EQ(b.shards.max_error(ref.t), 0.0)
      << "restored under " << restored_under.str() << ", zero 1";
  EXPECT_EQ(c.shards.max_error(ref.t), 0.0) << "restored under " << saved_under.str() << ", zero 0";
  EXPECT_TRUE(testing::bitwise_equal(td.values, ref.t.values)) << "restored into one process";
}

// Shards made for another tp size, or split over a group the optimizer does not put together,
// are refused in one line naming the tensor.
TEST(TensorParallelOptimizer, RefusesShardsItCannotPutTogether) {
  const Tensors g(tp_specs());
  const Shards two(g, 2, 0);
  const ShardLayout layout(two.registry, 1, 0, 0);
  const std::string message = k3::testing::error_of([&] {
    ShardedOptimizer(param_set(two.registry), two.plan(), {}, layout, dist::single_process(), 1);
  });
  EXPECT_NE(message.find("embed"), std::string::npos) << message;
  EXPECT_NE(message.find("tp rank 0 of 1"), std::string::npos) << message;

  model::ParamRegistry experts(model::GroupPlaces{{"ep", {2, 0}}});
  experts.add("w1", {4, 8}, model::ParamInit::zeros(), {0, "ep"});
  const std::string ep = k3::testing::error_of([&] { param_set(experts); });
  EXPECT_NE(ep.find("w1"), std::string::npos) << ep;
  EXPECT_NE(ep.find("over tp only"), std::string::npos) << ep;
}

}  // namespace
}  // namespace k3::parallel::tp_optimizer_test
