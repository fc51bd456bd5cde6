// The exchange of expert parallelism (model/experts/exchange.h), every rank of a group simulated
// in one process: each row is labelled with its source rank, expert and place, sent by the
// exchange's send and receive orders as all-to-all would deliver it, checked on its host, and
// sent back. Baseline (every row to its expert's home rank) and MoonEP plans, over routings from
// uniform to all-on-one-expert.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

#include "k3/model/experts/exchange.h"

namespace k3::model {
namespace {

// Rows routed by each of `ranks` ranks, S·K each, over `experts` experts with weights ∝ w(e).
std::vector<int64_t> random_loads(int ranks, int experts, int64_t rows, unsigned seed,
                                  const std::vector<double>& weight) {
  std::mt19937 rng(seed);
  std::discrete_distribution<int> pick(weight.begin(), weight.end());
  std::vector<int64_t> loads(static_cast<size_t>(ranks * experts), 0);
  for (int s = 0; s < ranks; ++s)
    for (int64_t i = 0; i < rows; ++i) ++loads[static_cast<size_t>(s * experts + pick(rng))];
  return loads;
}

// Label of source s's i-th row of expert e (exact in a float).
float label(int s, int e, int64_t i) { return static_cast<float>(s * 1000000 + e * 1000 + i); }

// Runs the dispatch and the combine over every rank; checks each row lands once, on a host of
// its expert, and comes back to where it left. Returns the rows computed per rank.
std::vector<int64_t> round_trip(const MoonEpShape& shape, const std::vector<int64_t>& loads,
                                const MoonEpPlan* plan) {
  const int P = shape.ranks, E = shape.experts;
  std::vector<ExpertExchange> x;
  for (int r = 0; r < P; ++r) x.push_back(make_exchange(shape, loads, plan, r));
  for (int h = 0; h < P; ++h)
    for (int q = 0; q < P; ++q)
      EXPECT_EQ(x[h].weights_to[q], x[q].weights_from[h]) << "replica weights " << h << " to " << q;
  // Each source's rows in sorted order, and its send buffer.
  std::vector<std::vector<float>> sorted(P), send(P);
  for (int s = 0; s < P; ++s) {
    for (int e = 0; e < E; ++e)
      for (int64_t i = 0; i < loads[static_cast<size_t>(s * E + e)]; ++i)
        sorted[s].push_back(label(s, e, i));
    send[s].resize(static_cast<size_t>(x[s].sent_rows()));
    copy_row_blocks(x[s].pack, sorted[s].data(), send[s].data(), 1);
  }
  // All-to-all: rank q receives from each source, in source order, what the source sent it.
  std::map<std::tuple<int, int, int64_t>, int> seen;
  std::vector<std::vector<float>> computed(P);
  for (int q = 0; q < P; ++q) {
    std::vector<float> recv;
    for (int s = 0; s < P; ++s) {
      int64_t at = 0;
      for (int t = 0; t < q; ++t) at += x[s].send_rows[t];
      EXPECT_EQ(x[s].send_rows[q], x[q].recv_rows[s]) << "source " << s << " to " << q;
      recv.insert(recv.end(), send[s].begin() + at, send[s].begin() + at + x[s].send_rows[q]);
    }
    computed[q].resize(static_cast<size_t>(x[q].computed_rows()));
    EXPECT_EQ(static_cast<int64_t>(recv.size()), x[q].computed_rows());
    copy_row_blocks(x[q].unpack, recv.data(), computed[q].data(), 1);
    for (int k = 0; k < x[q].slots(); ++k)
      for (int64_t r = x[q].slot_first[k]; r < x[q].slot_first[k + 1]; ++r) {
        const auto v = static_cast<int64_t>(computed[q][static_cast<size_t>(r)]);
        const int s = static_cast<int>(v / 1000000), e = static_cast<int>(v / 1000 % 1000);
        EXPECT_EQ(e, x[q].slot_expert[k]) << "rank " << q << " slot " << k;
        ++seen[{s, e, v % 1000}];
      }
    // Combine: the computed rows go back the same way (each row's value is its label).
    std::vector<float> back(recv.size());
    copy_row_blocks(x[q].unpack, back.data(), computed[q].data(), 1, true);
    EXPECT_EQ(back, recv) << "rank " << q;
  }
  int64_t total = 0;
  for (int64_t n : loads) total += n;
  EXPECT_EQ(static_cast<int64_t>(seen.size()), total) << "every row computed";
  for (const auto& [row, n] : seen) EXPECT_EQ(n, 1) << "row computed more than once";
  for (int s = 0; s < P; ++s) {
    std::vector<float> back(sorted[s].size(), -1.f);
    copy_row_blocks(x[s].pack, back.data(), send[s].data(), 1, true);
    EXPECT_EQ(back, sorted[s]) << "source " << s << ": the combine returns every row";
  }
  std::vector<int64_t> rows;
  for (const ExpertExchange& e : x) rows.push_back(e.computed_rows());
  return rows;
}

std::vector<int64_t> column_sums(const std::vector<int64_t>& loads, int experts) {
  std::vector<int64_t> out(static_cast<size_t>(experts), 0);
  for (size_t i = 0; i < loads.size(); ++i) out[i % static_cast<size_t>(experts)] += loads[i];
  return out;
}

struct Routing {
  const char* name;
  std::vector<double> (*weight)(int experts);
};

const Routing kRoutings[] = {
    {"uniform", [](int E) { return std::vector<double>(static_cast<size_t>(E), 1.0); }},
    {"zipf",
     [](int E) {
       std::vector<double> w;
       for (int e = 0; e < E; ++e) w.push_back(1.0 / (e + 1.0));
       return w;
     }},
    {"one expert",
     [](int E) {
       std::vector<double> w(static_cast<size_t>(E), 0.0);
       w[0] = 1;
       return w;
     }},
    {"one rank",
     [](int E) {
       std::vector<double> w(static_cast<size_t>(E), 0.0);
       w[0] = w[1] = 1;
       return w;
     }},
};

TEST(ExpertExchange, BaselineSendsEveryRowHomeAndBack) {
  for (const Routing& r : kRoutings)
    for (int P : {1, 2, 4}) {
      const MoonEpShape shape{P, 8, 0, 48};
      const auto loads = random_loads(P, 8, 48, 3, r.weight(8));
      const std::vector<int64_t> rows = round_trip(shape, loads, nullptr);
      const std::vector<int64_t> total = column_sums(loads, 8);
      for (int q = 0; q < P; ++q) {
        int64_t home = 0;
        for (int e = q * 8 / P; e < (q + 1) * 8 / P; ++e) home += total[static_cast<size_t>(e)];
        EXPECT_EQ(rows[static_cast<size_t>(q)], home) << r.name << ", P = " << P;
      }
    }
}

TEST(ExpertExchange, MoonEpComputesExactlySKOnEveryRank) {
  for (const Routing& r : kRoutings)
    for (int P : {2, 4, 8}) {
      const MoonEpShape shape{P, 16, 2, 40};
      const auto loads = random_loads(P, 16, 40, 5, r.weight(16));
      const MoonEpPlan plan = plan_moonep(shape, column_sums(loads, 16));
      ASSERT_TRUE(plan.balanced()) << r.name << ", P = " << P;
      for (int64_t rows : round_trip(shape, loads, &plan)) EXPECT_EQ(rows, 40) << r.name;
    }
}

// With no replica slots nothing can move: the overflowing rank computes its rows anyway.
TEST(ExpertExchange, AnUnbalanceablePlanStillComputesEveryRow) {
  const MoonEpShape shape{4, 8, 0, 30};
  const auto loads = random_loads(4, 8, 30, 7, kRoutings[2].weight(8));
  const MoonEpPlan plan = plan_moonep(shape, column_sums(loads, 8));
  ASSERT_FALSE(plan.balanced());
  const std::vector<int64_t> rows = round_trip(shape, loads, &plan);
  EXPECT_EQ(rows[0], 30 + plan.overflow);
}

}  // namespace
}  // namespace k3::model
