// Distributed Muon's block owners, its point-to-point traffic and its memory.
#include "k3/parallel/zero/distributed_muon.h"

#include <cstdio>
#include <limits>
#include <numeric>
#include <random>

#include "k3/parallel/zero/sharded_optimizer.h"
#include "parallel/zero_fixture.h"

namespace k3::parallel {
namespace {

using testing::Tensors;

double ns_cost(const MuonUnit& u) {
  const double m = static_cast<double>(std::min(u.rows, u.cols)),
               n = static_cast<double>(std::max(u.rows, u.cols));
  return 2 * m * m * n + m * m * m;
}

// Largest first onto the least loaded rank: no rank's load exceeds another's by more than the
// largest block, and every rank gets work when there are blocks enough.
TEST(DistributedMuon, OwnersBalanceNewtonSchulzWork) {
  std::vector<MuonUnit> blocks;
  for (int i = 0; i < 7; ++i) blocks.push_back({.rows = 64, .cols = 512});
  for (int i = 0; i < 2; ++i) blocks.push_back({.rows = 512, .cols = 512});
  for (int i = 0; i < 13; ++i) blocks.push_back({.rows = 16, .cols = 96});
  for (int ranks : {1, 2, 3, 4, 5}) {
    const std::vector<int> owners = assign_unit_owners(blocks, 1, ranks, 5);
    std::vector<double> load(static_cast<size_t>(ranks), 0.0);
    double largest = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      load[static_cast<size_t>(owners[b])] += ns_cost(blocks[b]);
      largest = std::max(largest, ns_cost(blocks[b]));
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, largest) << ranks << " ranks";
    EXPECT_GT(*lo, 0.0) << ranks << " ranks";
    EXPECT_EQ(owners, assign_unit_owners(blocks, 1, ranks, 5));  // deterministic
  }
}

// The owners by the plain rule: largest cost first (stable), each onto the first rank of least
// load met scanning dp coordinates outer and the unit's tp coordinates inner (rank t + tp·d,
// in increasing order), with a strict <.
std::vector<int> owners_by_scan(std::span<const MuonUnit> units, int tp, int dp) {
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return 5 * ns_cost(units[a]) > 5 * ns_cost(units[b]);
  });
  std::vector<double> load(static_cast<size_t>(tp * dp), 0.0);
  std::vector<int> owners(units.size(), 0);
  for (size_t u : order) {
    size_t best = 0;
    double least = std::numeric_limits<double>::infinity();
    for (int d = 0; d < dp; ++d)
      for (int t = units[u].tp_first; t < units[u].tp_end; ++t)
        if (const auto r = static_cast<size_t>(t + tp * d); load[r] < least) {
          least = load[r];
          best = r;
        }
    owners[u] = static_cast<int>(best);
    load[best] += 5 * ns_cost(units[u]);
  }
  return owners;
}

// Random units of a few shapes (so that loads tie often), each on one tp coordinate, a range of
// them or all: the owners equal the scan's, ties included.
TEST(DistributedMuon, OwnersEqualTheScanInRankOrder) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{64, 512}, {512, 64},  {512, 512},
                                                           {16, 96},  {128, 128}, {1, 7}};
  std::mt19937_64 rng(41);
  int compared = 0;
  for (int tp : {1, 2, 3, 4, 8})
    for (int dp : {1, 2, 3, 5, 16})
      for (int n : {0, 1, 7, 60, 400}) {
        std::vector<MuonUnit> units;
        for (int k = 0; k < n; ++k) {
          const auto [rows, cols] = shapes[rng() % shapes.size()];
          MuonUnit u{.rows = rows, .cols = cols};
          // One coordinate, a range of them, or all.
          const uint64_t kind = rng() % 3;
          const int first = static_cast<int>(rng() % static_cast<uint64_t>(tp)),
                    more = static_cast<int>(rng() % static_cast<uint64_t>(tp - first));
          u.tp_first = kind == 2 ? 0 : first;
          u.tp_end = kind == 0 ? first + 1 : kind == 1 ? first + 1 + more : tp;
          units.push_back(u);
        }
        EXPECT_EQ(assign_unit_owners(units, tp, dp, 5), owners_by_scan(units, tp, dp))
            << "tp " << tp << ", dp " << dp << ", " << n << " units";
        ++compared;
      }
  EXPECT_EQ(compared, 125);
}

// One step's Muon point-to-point bytes, as the group's counters saw them, equal the analytic
// count; ZeRO 2 moves the gradient pieces too, so twice ZeRO 1's. Prints the figures.
void check_traffic(Tensors& t, size_t bucket_floats, const char* what) {
  const dist::Comm world = dist::Comm::world();
  const dist::ProcessGrid grid(dist::ParallelDims{.dp = world.size()}, world);
  int64_t moved[3] = {};
  for (int zero : {1, 2}) {
    const ShardLayout layout = t.layout(world.size(), world.rank(), bucket_floats);
    ShardedOptimizer opt(t.set(), t.plan(), optim::OptimizerConfig{}, layout, grid, zero);
    t.set_gradient(0, zero == 2 ? &layout : nullptr);
    opt.step(testing::kLr, testing::kGradScale);
    const DistributedMuon& muon = *opt.distributed_muon();
    const MuonTraffic traffic = opt.muon_traffic();
    EXPECT_EQ(traffic.p2p_bytes, muon_p2p_bytes(muon.units(), muon.owners(), 1, zero, world.rank()))
        << what << ", zero " << zero << ", rank " << world.rank();
    EXPECT_EQ(traffic.p2p_bytes, muon.expected_p2p_bytes());
    moved[zero] = traffic.p2p_bytes;
    int64_t total = traffic.p2p_bytes;
    dist::Comm(world).all_reduce(&total, 1);
    if (world.size() > 1) {
      EXPECT_GT(total, 0) << what << ": the layout should cut some block";
      EXPECT_LT(traffic.x_buffer_bytes, traffic.all_gather_bytes) << what;
    }
    std::printf(
        "[muon figures] %s, zero %d, rank %d of %d: X buffers %lld B + Newton-Schulz workspace "
        "%lld B (all-gather approach: %lld B + the same workspace); p2p %lld B, analytic %lld B\n",
        what, zero, world.rank(), world.size(), static_cast<long long>(traffic.x_buffer_bytes),
        static_cast<long long>(traffic.workspace_bytes),
        static_cast<long long>(traffic.all_gather_bytes), static_cast<long long>(traffic.p2p_bytes),
        static_cast<long long>(muon.expected_p2p_bytes()));
  }
  EXPECT_EQ(moved[2], 2 * moved[1]) << what;
}

TEST(DistributedMuonMpi, TrafficEqualsTheAnalyticCount) {
  Tensors t;
  check_traffic(t, 64, "test tensors");
}

// A K3-shaped slice at d = 512: Per-Head Muon projections, whole matrices (wide, square, tall),
// stacked experts; buckets of 256 Ki floats.
TEST(DistributedMuonMpi, FiguresAtWidth512) {
  using K = optim::OptimizerKind;
  Tensors t({{"embed", {1024, 512}, K::adamw, 0, false},
             {"q_proj", {8 * 64, 512}, K::muon, 64},
             {"o_proj", {512, 512}, K::muon, 0},
             {"kv_proj", {8 * 128, 512}, K::muon, 128},
             {"experts.up", {8, 256, 512}, K::muon, 256},
             {"experts.down", {8, 512, 256}, K::muon, 512},
             {"shared.up", {1024, 512}, K::muon, 0},
             {"norm", {512}, K::adamw, 0, false}});
  check_traffic(t, size_t{256} << 10, "width 512");
}

}  // namespace
}  // namespace k3::parallel
