// Under `mpirun -np 2` (skipped otherwise): a column Linear then a row Linear split over tp = 2 give every rank
// the unsplit pair's output and input gradient (the row layer's all-reduce of y, the column
// layer's all-reduce of dx, which must not sum what dx already held).
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "k3/base/philox.h"
#include "k3/dist/grid.h"
#include "k3/dist/runtime.h"
#include "k3/model/layers/linear.h"

namespace k3::model {
namespace {

std::vector<float> random(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_normal(v.data(), n, seed, 1, 0, 0.f, 1.f);
  return v;
}

TEST(LinearTensorParallelMpi, ColumnThenRowPairMatchesUnsplit) {
  if (dist::Comm::world().size() != 2) GTEST_SKIP() << "runs under mpirun -np 2";
  const dist::ProcessGrid grid({.tp = 2}, dist::Comm::world());
  const int64_t rows = 3, d = 8, width = 12;
  const std::vector<float> x = random(rows * d, 1), dy = random(rows * d, 2),
                           dx0 = random(rows * d, 3);
  Arena arena(size_t{1} << 20, false);
  activation::ActivationManager acts;
  // Runs up then down, then their backward; dx starts at dx0 and the pair's gradient is added.
  auto run = [&](ParamRegistry& reg, LinearMode first, LinearMode second,
                 const dist::ProcessGrid& g, std::vector<float>& y, std::vector<float>& dx) {
    const Linear up(reg, "up", d, width, 0.4f, first), down(reg, "down", width, d, 0.4f, second);
    reg.allocate();
    reg.initialize(5);
    const Step s{arena, acts, reg, true, g};
    std::vector<float> h(static_cast<size_t>(rows * up.out())), dh(h.size());
    y.assign(static_cast<size_t>(rows * d), 0.f);
    dx = dx0;
    up.forward(s, x.data(), rows, h.data());
    down.forward(s, h.data(), rows, y.data());
    down.backward(s, h.data(), dy.data(), rows, dh.data(), false);
    up.backward(s, x.data(), dh.data(), rows, dx.data(), true);
  };
  ParamRegistry whole, shard(places_of(grid));
  std::vector<float> want_y, want_dx, y, dx;
  run(whole, LinearMode::replicated, LinearMode::replicated, dist::single_process(), want_y,
      want_dx);
  run(shard, LinearMode::column, LinearMode::row, grid, y, dx);
  EXPECT_EQ(shard.info(0).local_shape, (Shape{width / 2, d}));
  K3_EXPECT_CLOSE(y, want_y, 1e-6, 1e-5);
  K3_EXPECT_CLOSE(dx, want_dx, 1e-6, 1e-5);
  EXPECT_EQ(grid.tp().counters()[dist::Op::all_reduce].calls, 2);
}

}  // namespace
}  // namespace k3::model
