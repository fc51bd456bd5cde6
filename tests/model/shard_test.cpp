// Sharded parameters: the registry's local shapes and the shards' values, and Linear's column
// and row modes. Ranks of a group of 2 are described to the registry without starting processes;
// their collectives (a group of one here) are then summed by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/model/layers/linear.h"
#include "k3/model/params.h"

namespace k3::model {
namespace {

// A [6, 4] normal matrix, a [4, 6, 2] stack with a custom init, a replicated vector: the first
// two split along `dim` over tp.
void register_all(ParamRegistry& reg, int dim) {
  reg.add("w", {6, 4}, ParamInit::normal(0.5f), {dim, "tp"});
  ParamInit custom;
  custom.kind = ParamInit::Kind::Custom;
  custom.fill = [](float* out, int64_t first, int64_t n, uint64_t seed, uint64_t stream) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(first + i) + philox_uniform(seed, stream, first + i);
  };
  reg.add("stack", {4, 6, 2}, custom, {dim, "tp"});
  reg.add("norm", {5}, ParamInit::ones());
  reg.allocate();
  reg.initialize(7);
}

// The slice [start, start + extent) along `dim` of a row-major tensor.
std::vector<float> slice(const Tensor& t, int dim, int64_t start, int64_t extent) {
  const Shape& s = t.shape();
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < s.size(); ++k)
    if (static_cast<int>(k) < dim)
      outer *= s[k];
    else if (static_cast<int>(k) > dim)
      inner *= s[k];
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o) {
    const float* row = t.f32() + (o * s[static_cast<size_t>(dim)] + start) * inner;
    out.insert(out.end(), row, row + extent * inner);
  }
  return out;
}

TEST(ShardedRegistry, ShardsAreSlicesOfTheUnsplitTensors) {
  ParamRegistry whole;
  register_all(whole, 0);
  for (int dim : {0, 1})
    for (int rank : {0, 1}) {
      ParamRegistry shard(GroupPlaces{{"tp", {2, rank}}});
      register_all(shard, dim);
      for (int i = 0; i < 2; ++i) {
        const ParamInfo& p = shard.info(i);
        EXPECT_EQ(p.shape, whole.info(i).shape);
        Shape local = p.shape;
        local[static_cast<size_t>(dim)] /= 2;
        EXPECT_EQ(p.local_shape, local);
        EXPECT_EQ(shard.value(i).shape(), local);
        EXPECT_EQ(shard.grad(i).shape(), local);
        EXPECT_EQ(p.shard_start, rank * local[static_cast<size_t>(dim)]);
        const Tensor v = shard.value(i);
        const std::vector<float> want =
            slice(whole.value(i), dim, p.shard_start, local[static_cast<size_t>(dim)]);
        ASSERT_EQ(static_cast<size_t>(v.numel()), want.size());
        EXPECT_EQ(std::memcmp(v.f32(), want.data(), want.size() * sizeof(float)), 0)
            << p.name << " dim " << dim << " rank " << rank;
      }
      // Replicated: the whole tensor on every rank; the flat buffers hold shards only.
      EXPECT_EQ(shard.value(2).shape(), (Shape{5}));
      EXPECT_LT(shard.flat_size(), whole.flat_size());
      EXPECT_EQ(shard.total_numel(), whole.total_numel());
    }
}

TEST(ShardedRegistry, RefusesUnevenSplits) {
  ParamRegistry reg(GroupPlaces{{"tp", {4, 1}}});
  const std::string e = testing::error_of([&] {
    reg.add("w", {6, 4}, ParamInit::zeros(), {0, "tp"});
  });
  EXPECT_NE(
      e.find("'w' of shape [6, 4]: dimension 0 does not split evenly over group tp of size 4"),
      std::string::npos)
      << e;
  EXPECT_THROW(reg.add("v", {6}, ParamInit::zeros(), {1, "tp"}), Error);
  EXPECT_THROW(ParamRegistry(GroupPlaces{{"tp", {2, 2}}}), Error);
}

// The names index every tensor, those registered before the first lookup (indexed then, at
// once) and those after it (through the table's growth): each found at its index, an absent name
// (also one a prefix or an extension of a registered one) not, a second registration refused,
// and a refused registration not found.
TEST(ShardedRegistry, FindsEveryNameItRegistered) {
  ParamRegistry reg(GroupPlaces{{"tp", {2, 0}}});
  const int n = 5000;  // indexed at 2500 in 8192 slots, which grow once
  auto name = [](int i) { return "model.layers." + std::to_string(i % 93) + ".experts." +
                                 std::to_string(i) + ".w1.weight"; };
  for (int i = 0; i < n / 2; ++i) ASSERT_EQ(reg.add(name(i), {2, 3}, ParamInit::zeros()), i);
  EXPECT_EQ(reg.find(name(0)), 0);
  for (int i = n / 2; i < n; ++i) ASSERT_EQ(reg.add(name(i), {2, 3}, ParamInit::zeros()), i);
  for (int i = 0; i < n; ++i) ASSERT_EQ(reg.find(name(i)), i) << name(i);
  EXPECT_EQ(reg.find("model.layers.0.experts.0.w1"), -1);
  EXPECT_EQ(reg.find(name(0) + "x"), -1);
  EXPECT_EQ(reg.find(""), -1);
  EXPECT_EQ(ParamRegistry().find("w"), -1);
  for (int twice : {1234, 4321}) {  // indexed at once, and through the growth
    const std::string e = testing::error_of([&] { reg.add(name(twice), {1}, ParamInit::zeros()); });
    EXPECT_NE(e.find("'" + name(twice) + "' registered twice"), std::string::npos) << e;
  }
  EXPECT_THROW(reg.add("odd", {3}, ParamInit::zeros(), {0, "tp"}), Error);  // uneven over tp
  EXPECT_EQ(reg.find("odd"), -1);
  EXPECT_EQ(reg.size(), n);
  EXPECT_EQ(reg.add("odd", {4}, ParamInit::zeros(), {0, "tp"}), n);  // the refused left no trace
  EXPECT_EQ(reg.find("odd"), n);
}

// A registry that no one looks a name up in (a rank the planner describes) indexes no name: a
// name registered twice before the index is refused when it is built, by the first lookup and
// each one after, and by allocate().
TEST(ShardedRegistry, RefusesANameRegisteredTwiceWhenItIndexesTheNames) {
  auto register_twice = [](ParamRegistry& reg) {
    for (const char* name : {"a.weight", "b.weight", "c.weight", "a.weight"})
      reg.add(name, {2}, ParamInit::zeros());
  };
  ParamRegistry looked_up;
  register_twice(looked_up);
  for (int lookup = 0; lookup < 2; ++lookup) {
    const std::string e = testing::error_of([&] { looked_up.find("b.weight"); });
    EXPECT_NE(e.find("'a.weight' registered twice"), std::string::npos) << e;
  }
  ParamRegistry allocated;
  register_twice(allocated);
  const std::string e = testing::error_of([&] { allocated.allocate(); });
  EXPECT_NE(e.find("'a.weight' registered twice"), std::string::npos) << e;
  EXPECT_EQ(allocated.values(), nullptr);
}

// One registry per rank of tp = 2 and the unsplit one, all with the same global weights.
struct Ranks {
  ParamRegistry whole, rank[2]{ParamRegistry(GroupPlaces{{"tp", {2, 0}}}),
                               ParamRegistry(GroupPlaces{{"tp", {2, 1}}})};
  Arena arena{size_t{1} << 20, false};
  activation::ActivationManager acts;
  Step step(ParamRegistry& reg) { return Step{arena, acts, reg, true}; }
};

std::vector<float> random(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_normal(v.data(), n, seed, 1, 0, 0.f, 1.f);
  return v;
}

// With tp of size 1 the three modes are the same layer, bit for bit.
TEST(LinearModes, AllModesEqualReplicatedWithoutTensorParallelism) {
  const int64_t rows = 5, in = 8, out = 6;
  const std::vector<float> x = random(rows * in, 1), dy = random(rows * out, 2),
                           dx0 = random(rows * in, 3);
  std::vector<float> want_y, want_dx, want_dw;
  for (LinearMode mode : {LinearMode::replicated, LinearMode::column, LinearMode::row}) {
    Ranks r;
    Linear lin(r.whole, "lin", in, out, 0.3f, mode);
    r.whole.allocate();
    r.whole.initialize(4);
    std::vector<float> y(static_cast<size_t>(rows * out)), dx = dx0;
    lin.forward(r.step(r.whole), x.data(), rows, y.data());
    lin.backward(r.step(r.whole), x.data(), dy.data(), rows, dx.data(), true);
    const Tensor dw = r.whole.grad(lin.weight());
    if (mode == LinearMode::replicated) {
      want_y = y, want_dx = dx, want_dw.assign(dw.f32(), dw.f32() + dw.numel());
      continue;
    }
    EXPECT_EQ(y, want_y);
    EXPECT_EQ(dx, want_dx);
    EXPECT_EQ(std::memcmp(dw.f32(), want_dw.data(), want_dw.size() * sizeof(float)), 0);
  }
}

// The tensor-parallel pair of an MLP: a column layer then a row layer, split over two ranks.
// Rank outputs summed (the row layer's all-reduce) give the unsplit y; the column layer's input
// gradients summed (its all-reduce) give the unsplit dx; each rank's weight gradient is the
// slice of the unsplit one.
TEST(LinearModes, ColumnThenRowPairOverTwoRanksMatchesUnsplit) {
  const int64_t rows = 3, d = 4, width = 6;
  const std::vector<float> x = random(rows * d, 5), dy = random(rows * d, 6);
  Ranks r;
  struct Pair {
    Linear up, down;
  };
  auto make = [](ParamRegistry& reg, LinearMode first, LinearMode second) {
    Pair p{Linear(reg, "up", d, width, 0.5f, first), Linear(reg, "down", width, d, 0.5f, second)};
    reg.allocate();
    reg.initialize(9);
    return p;
  };
  // Runs the pair, returning y, and dx of the whole input (this rank's part for a split pair).
  auto run = [&](ParamRegistry& reg, const Pair& p, std::vector<float>& dx) {
    const Step s = r.step(reg);
    std::vector<float> h(static_cast<size_t>(rows * p.up.out())), y(static_cast<size_t>(rows * d));
    std::vector<float> dh(h.size());
    p.up.forward(s, x.data(), rows, h.data());
    p.down.forward(s, h.data(), rows, y.data());
    p.down.backward(s, h.data(), dy.data(), rows, dh.data(), false);
    dx.assign(static_cast<size_t>(rows * d), 0.f);
    p.up.backward(s, x.data(), dh.data(), rows, dx.data(), false);
    return y;
  };
  const Pair whole = make(r.whole, LinearMode::replicated, LinearMode::replicated);
  std::vector<float> want_dx, dx[2], y[2];
  const std::vector<float> want_y = run(r.whole, whole, want_dx);
  for (int k = 0; k < 2; ++k) {
    const Pair p = make(r.rank[k], LinearMode::column, LinearMode::row);
    EXPECT_EQ(p.up.out(), width / 2);
    EXPECT_EQ(p.down.in(), width / 2);
    y[k] = run(r.rank[k], p, dx[k]);
    const Tensor dup = r.rank[k].grad(p.up.weight()), ddown = r.rank[k].grad(p.down.weight());
    const std::vector<float> want_up =
        slice(r.whole.grad(whole.up.weight()), 0, k * width / 2, width / 2);
    const std::vector<float> want_down =
        slice(r.whole.grad(whole.down.weight()), 1, k * width / 2, width / 2);
    K3_EXPECT_CLOSE(std::vector<float>(dup.f32(), dup.f32() + dup.numel()), want_up, 1e-6, 1e-5);
    K3_EXPECT_CLOSE(std::vector<float>(ddown.f32(), ddown.f32() + ddown.numel()), want_down, 1e-6,
                    1e-5);
  }
  std::vector<float> y_sum(want_y.size()), dx_sum(want_dx.size());
  for (size_t i = 0; i < y_sum.size(); ++i) y_sum[i] = y[0][i] + y[1][i];
  for (size_t i = 0; i < dx_sum.size(); ++i) dx_sum[i] = dx[0][i] + dx[1][i];
  K3_EXPECT_CLOSE(y_sum, want_y, 1e-6, 1e-5);
  K3_EXPECT_CLOSE(dx_sum, want_dx, 1e-6, 1e-5);
}

}  // namespace
}  // namespace k3::model
