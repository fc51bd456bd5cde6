// MoonEP's planner: every routing is placed row for row; with enough replica slots every rank
// computes exactly S·K rows; the plan is deterministic; a routing the slots cannot balance is
// reported, with every row still placed.
#include "k3/model/experts/moonep_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

namespace k3::model {
namespace {

// Every row of every expert placed once, on distinct ranks, the home rank first; the per-rank
// rows and replica counts add up; no rank over its slots. Returns nothing: it fails the test.
void expect_valid(const MoonEpShape& s, const std::vector<int64_t>& load, const MoonEpPlan& p) {
  ASSERT_EQ(static_cast<int>(p.hosts.size()), s.experts);
  std::vector<int64_t> rows(s.ranks, 0);
  std::vector<int> replicas(s.ranks, 0);
  for (int e = 0; e < s.experts; ++e) {
    const auto& h = p.hosts[e];
    ASSERT_FALSE(h.empty());
    EXPECT_EQ(h[0].rank, s.home_rank(e)) << "expert " << e;
    std::set<int> ranks;
    int64_t placed = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      EXPECT_TRUE(ranks.insert(h[i].rank).second)
          << "expert " << e << " twice on rank " << h[i].rank;
      EXPECT_GE(h[i].rows, 0);
      if (i > 0) {
        EXPECT_GT(h[i].rows, 0) << "an empty replica of expert " << e;
        ++replicas[h[i].rank];
      }
      placed += h[i].rows;
      rows[h[i].rank] += h[i].rows;
    }
    EXPECT_EQ(placed, load[e]) << "expert " << e << ": rows lost or duplicated";
  }
  EXPECT_EQ(rows, p.rows);
  EXPECT_EQ(replicas, p.replicas);
  int64_t overflow = 0;
  for (int r = 0; r < s.ranks; ++r) {
    EXPECT_LE(replicas[r], s.replica_slots) << "rank " << r;
    overflow = std::max(overflow, rows[r] - s.rows_per_rank);
  }
  EXPECT_EQ(overflow, p.overflow);
  if (p.balanced()) {
    for (int r = 0; r < s.ranks; ++r) EXPECT_EQ(rows[r], s.rows_per_rank) << "rank " << r;
  }
}

// S tokens on each rank each pick K distinct experts, expert e with weight w[e]; the loads.
std::vector<int64_t> route(const MoonEpShape& s, int64_t tokens, int k,
                           const std::vector<double>& w, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> load(s.experts, 0);
  for (int64_t t = 0; t < tokens * s.ranks; ++t) {
    std::vector<double> left = w;
    for (int j = 0; j < k; ++j) {
      std::discrete_distribution<int> pick(left.begin(), left.end());
      const int e = pick(rng);
      ++load[e];
      left[e] = 0;
    }
  }
  return load;
}

std::vector<double> zipf(int experts, double a) {
  std::vector<double> w(experts);
  for (int e = 0; e < experts; ++e) w[e] = 1.0 / std::pow(e + 1.0, a);
  return w;
}

constexpr int64_t kTokens = 64;
constexpr int kTopK = 4;
MoonEpShape shape(int ranks, int experts, int slots) {
  return {ranks, experts, slots, kTokens * kTopK};
}

TEST(MoonEpPlan, UniformRoutingNeedsNoReplica) {
  const MoonEpShape s = shape(4, 16, 2);
  const std::vector<int64_t> load(16, 4 * kTokens * kTopK / 16);
  const MoonEpPlan p = plan_moonep(s, load);
  expect_valid(s, load, p);
  EXPECT_TRUE(p.balanced());
  EXPECT_EQ(p.replicas, std::vector<int>(4, 0));
  EXPECT_DOUBLE_EQ(maxvio(load), 0);
}

TEST(MoonEpPlan, EveryTokenToOneExpertIsBalancedWithOneSlot) {
  for (int hot : {0, 5, 15}) {
    const MoonEpShape s = shape(4, 16, 1);
    std::vector<int64_t> load(16, 0);
    load[hot] = 4 * s.rows_per_rank;
    const MoonEpPlan p = plan_moonep(s, load);
    expect_valid(s, load, p);
    EXPECT_TRUE(p.balanced()) << "expert " << hot;
    EXPECT_EQ(p.hosts[hot].size(), 4u) << "the home rank and one replica on each other rank";
    EXPECT_DOUBLE_EQ(maxvio(load), 15);
  }
}

TEST(MoonEpPlan, EveryTokenToOneRanksExpertsIsBalanced) {
  const MoonEpShape s = shape(4, 16, 2);
  std::vector<int64_t> load(16, 0);
  for (int e = 8; e < 12; ++e) load[e] = s.rows_per_rank;  // rank 2's four experts
  const MoonEpPlan p = plan_moonep(s, load);
  expect_valid(s, load, p);
  EXPECT_TRUE(p.balanced());
  EXPECT_EQ(p.rows[2], s.rows_per_rank);
}

TEST(MoonEpPlan, SkewedRoutingsAreBalancedWithTwoSlots) {
  for (double a : {0.8, 1.2, 2.0})
    for (uint32_t seed : {1u, 2u, 3u}) {
      const MoonEpShape s = shape(4, 32, 2);
      const std::vector<int64_t> load = route(s, kTokens, kTopK, zipf(32, a), seed);
      const MoonEpPlan p = plan_moonep(s, load);
      expect_valid(s, load, p);
      EXPECT_TRUE(p.balanced()) << "zipf " << a << " seed " << seed << ": overflow " << p.overflow;
      // A permutation of the experts moves the hot ones to other home ranks.
      std::vector<int64_t> shuffled = load;
      std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(seed));
      const MoonEpPlan q = plan_moonep(s, shuffled);
      expect_valid(s, shuffled, q);
      EXPECT_TRUE(q.balanced()) << "zipf " << a << " seed " << seed << " shuffled";
    }
}

TEST(MoonEpPlan, SameRoutingSamePlan) {
  const MoonEpShape s = shape(8, 64, 2);
  const std::vector<int64_t> load = route(s, kTokens, kTopK, zipf(64, 1.1), 7);
  const MoonEpPlan a = plan_moonep(s, load), b = plan_moonep(s, load);
  ASSERT_EQ(a.hosts.size(), b.hosts.size());
  for (size_t e = 0; e < a.hosts.size(); ++e) {
    ASSERT_EQ(a.hosts[e].size(), b.hosts[e].size());
    for (size_t i = 0; i < a.hosts[e].size(); ++i) {
      EXPECT_EQ(a.hosts[e][i].rank, b.hosts[e][i].rank);
      EXPECT_EQ(a.hosts[e][i].rows, b.hosts[e][i].rows);
    }
  }
}

// An over-full rank's excess may travel through another rank: three ranks 10 rows over and one
// 30 under balance with one slot each (the under-full rank takes 30 of rank 0's expert, rank 0
// 20 of rank 1's, rank 1 10 of rank 2's), and with no slot nothing moves.
TEST(MoonEpPlan, ExcessTravelsThroughOverFullRanks) {
  const std::vector<int64_t> load{110, 110, 110, 70};
  const MoonEpPlan one = plan_moonep({4, 4, 1, 100}, load);
  expect_valid({4, 4, 1, 100}, load, one);
  EXPECT_TRUE(one.balanced());
  EXPECT_EQ(one.replicas, (std::vector<int>{1, 1, 0, 1}));
  const MoonEpPlan none = plan_moonep({4, 4, 0, 100}, load);
  expect_valid({4, 4, 0, 100}, load, none);
  EXPECT_EQ(none.overflow, 10);
  EXPECT_EQ(none.rows, load);
}

// Rank 2 has room for 60 rows, and no expert of the over-full ranks 0, 1, 3 has 60: it needs a
// replica of each (20 rows each). With fewer slots the plan says so and places every row anyway.
TEST(MoonEpPlan, TooFewSlotsIsReportedAndNoRowIsDropped) {
  const std::vector<int64_t> load{30, 30, 30, 30, 30, 30, 30, 30, 10, 10, 10, 10, 30, 30, 30, 30};
  for (int slots : {1, 2, 3}) {
    const MoonEpShape s{4, 16, slots, 100};
    const MoonEpPlan p = plan_moonep(s, load);
    expect_valid(s, load, p);
    EXPECT_EQ(p.overflow, slots < 3 ? 20 : 0) << slots << " slots";
    EXPECT_EQ(p.rows[2], 40 + 20 * slots) << slots << " slots";
  }
}

TEST(MoonEpPlan, BadShapesAndLoadsAreErrorsNamingThem) {
  const auto message = [](const MoonEpShape& s, const std::vector<int64_t>& load) {
    try {
      plan_moonep(s, load);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({4, 6, 1, 1}, std::vector<int64_t>(6, 0)).find("6 experts do not split"),
            std::string::npos);
  EXPECT_NE(message({2, 4, 1, 2}, {1, 1, 1}).find("3 loads for 4 experts"), std::string::npos);
  EXPECT_NE(message({2, 4, 1, 2}, {1, 1, 1, 2}).find("sum to 5 rows"), std::string::npos);
  EXPECT_NE(message({2, 4, 1, 2}, {5, -1, 0, 0}).find("expert 1 has load -1"), std::string::npos);
  EXPECT_NE(message({2, 4, -1, 2}, {1, 1, 1, 1}).find("replica_slots = -1"), std::string::npos);
}

}  // namespace
}  // namespace k3::model
