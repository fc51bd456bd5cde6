// The collectives and the process grid, run in one process (a world of one) and under
// mpirun -np 2, 3 and 4 (tests/CMakeLists.txt). Every expected value is computed from the ranks'
// known contributions, so each test checks the data that arrived, not only that nothing hung.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "k3/base/error.h"
#include "k3/dist/grid.h"

namespace k3::dist {
namespace {

Comm world() { return Comm::world(); }

// What rank r contributes at element i.
float value(int r, int64_t i) { return static_cast<float>(100 * r + i) * 0.5f; }

TEST(Collectives, AllReduceSumsEveryRank) {
  const Comm w = world();
  const int n = w.size();
  std::vector<float> f(37);
  std::vector<double> d(5);
  std::vector<int64_t> k(3);
  for (size_t i = 0; i < f.size(); ++i) f[i] = value(w.rank(), static_cast<int64_t>(i));
  for (size_t i = 0; i < d.size(); ++i) d[i] = w.rank() + 0.25 * static_cast<double>(i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = (int64_t{1} << 40) * w.rank() + static_cast<int64_t>(i);
  Request rf = w.all_reduce_async(f.data(), static_cast<int64_t>(f.size()));
  w.all_reduce(d.data(), static_cast<int64_t>(d.size()));
  w.all_reduce(k.data(), static_cast<int64_t>(k.size()));
  rf.wait();
  const double ranks_sum = n * (n - 1) / 2.0;
  for (size_t i = 0; i < f.size(); ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += value(r, static_cast<int64_t>(i));
    EXPECT_FLOAT_EQ(f[i], static_cast<float>(want)) << i;
  }
  for (size_t i = 0; i < d.size(); ++i) EXPECT_DOUBLE_EQ(d[i], ranks_sum + n * 0.25 * static_cast<double>(i));
  for (size_t i = 0; i < k.size(); ++i)
    EXPECT_EQ(k[i], (int64_t{1} << 40) * static_cast<int64_t>(ranks_sum) + n * static_cast<int64_t>(i));
}

// Uneven blocks (some empty) catch displacement mistakes an even split would hide.
std::vector<int64_t> uneven_counts(int n) {
  std::vector<int64_t> c;
  for (int r = 0; r < n; ++r) c.push_back(r == 1 ? 0 : 3 + 2 * r);
  return c;
}

TEST(Collectives, ReduceScatterLeavesEachRankTheSumOfItsBlock) {
  const Comm w = world();
  const std::vector<int64_t> counts = uneven_counts(w.size());
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> in(static_cast<size_t>(total)), out(static_cast<size_t>(counts[static_cast<size_t>(w.rank())]) + 1, -7.f);
  for (int64_t i = 0; i < total; ++i) in[static_cast<size_t>(i)] = value(w.rank(), i);
  w.reduce_scatter_async(in.data(), out.data(), counts).wait();
  const int64_t first = std::accumulate(counts.begin(), counts.begin() + w.rank(), int64_t{0});
  for (int64_t j = 0; j < counts[static_cast<size_t>(w.rank())]; ++j) {
    double want = 0;
    for (int r = 0; r < w.size(); ++r) want += value(r, first + j);
    EXPECT_FLOAT_EQ(out[static_cast<size_t>(j)], static_cast<float>(want)) << j;
  }
  EXPECT_EQ(out.back(), -7.f) << "wrote past this rank's block";
}

TEST(Collectives, AllGatherInPlaceRebuildsEveryBlock) {
  const Comm w = world();
  const std::vector<int64_t> counts = uneven_counts(w.size());
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<double> data(static_cast<size_t>(total), -1.0);
  int64_t at = 0;
  for (int r = 0; r < w.size(); ++r) {
    for (int64_t j = 0; j < counts[static_cast<size_t>(r)]; ++j)
      if (r == w.rank()) data[static_cast<size_t>(at + j)] = value(r, j);
    at += counts[static_cast<size_t>(r)];
  }
  w.all_gather(data.data(), counts);
  at = 0;
  for (int r = 0; r < w.size(); ++r)
    for (int64_t j = 0; j < counts[static_cast<size_t>(r)]; ++j)
      EXPECT_EQ(data[static_cast<size_t>(at++)], value(r, j)) << "block of rank " << r;
}

TEST(Collectives, AllToAllDeliversEachPairsBlock) {
  const Comm w = world();
  const int n = w.size(), me = w.rank();
  // Rank s sends s + d + 1 elements to rank d, each encoding (s, d, j).
  auto code = [](int s, int d, int64_t j) { return static_cast<int32_t>(10000 * s + 100 * d + j); };
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<int32_t> in;
  for (int d = 0; d < n; ++d) {
    send_counts.push_back(me + d + 1);
    recv_counts.push_back(d + me + 1);
    for (int64_t j = 0; j < me + d + 1; ++j) in.push_back(code(me, d, j));
  }
  std::vector<int32_t> out(static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})));
  w.all_to_all(in.data(), send_counts, out.data(), recv_counts);
  size_t at = 0;
  for (int s = 0; s < n; ++s)
    for (int64_t j = 0; j < s + me + 1; ++j) EXPECT_EQ(out[at++], code(s, me, j));
}

TEST(Collectives, SendReceiveAroundARingAndBroadcast) {
  const Comm w = world();
  std::vector<float> b(4);
  for (int64_t i = 0; i < 4; ++i) b[static_cast<size_t>(i)] = w.rank() == 0 ? value(7, i) : 0.f;
  w.broadcast(b.data(), 4, 0);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(b[static_cast<size_t>(i)], value(7, i));
  if (w.size() == 1) return;
  const int next = (w.rank() + 1) % w.size(), prev = (w.rank() + w.size() - 1) % w.size();
  std::vector<int64_t> out = {w.rank(), 42}, in(2, -1);
  Request r = w.recv_async(in.data(), 2, prev, 5);
  Request s = w.send_async(out.data(), 2, next, 5);
  r.wait();
  s.wait();
  EXPECT_EQ(in[0], prev);
  EXPECT_EQ(in[1], 42);
}

TEST(Collectives, CountersRecordCallsAndPayloadBytes) {
  const Comm w = world().split("counted", 0, world().rank());  // a fresh group, fresh counters
  std::vector<float> f(10);
  w.all_reduce(f.data(), 10);
  std::vector<int64_t> counts(static_cast<size_t>(w.size()), 2);
  std::vector<float> in(static_cast<size_t>(2 * w.size())), out(2);
  w.reduce_scatter(in.data(), out.data(), counts);
  w.all_gather(in.data(), counts);
  const Counters& c = w.counters();
  EXPECT_EQ(c[Op::all_reduce].calls, 1);
  EXPECT_EQ(c[Op::reduce_scatter].calls, 1);
  EXPECT_EQ(c[Op::all_gather].calls, 1);
  const int64_t bytes = w.size() > 1 ? 4 * (10 + 2 * w.size() + 2 * w.size()) : 0;
  EXPECT_EQ(c.bytes(), bytes);
  EXPECT_EQ(c.calls(), 3);
  if (w.size() == 1) EXPECT_EQ(c.seconds(), 0.0) << "a group of one waits for no one";
  else EXPECT_GT(c[Op::all_gather].seconds, 0.0);
}

// Seconds are the time a rank is blocked in an operation. kLate is long against a collective of
// a few floats even with 4 busy-polling ranks sharing 2 loaded cores: there it completes within
// milliseconds, but a rank can lose its core for a scheduler slice or more, so the half of kLate
// the checks compare with is kept far above any such delay.
constexpr double kLate = 1.0;
void sleep_for(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// A rank that arrives late makes the others' seconds for that operation grow, not its own: for a
// blocking call (its whole duration) and for a non-blocking one (its wait).
TEST(Collectives, SecondsGrowOnTheRanksThatWaitForALateOne) {
  const Comm w = world().split("late", 0, world().rank());
  if (w.size() == 1) GTEST_SKIP() << "under mpirun";
  std::vector<float> f(8);
  if (w.rank() == 0) sleep_for(kLate);
  w.all_reduce(f.data(), 8);
  const int last = w.size() - 1;
  std::vector<int64_t> counts(static_cast<size_t>(w.size()), 2);
  if (w.rank() == last) sleep_for(kLate);
  w.all_gather_async(f.data(), counts).wait();
  const Counters& c = w.counters();
  const double reduce = c[Op::all_reduce].seconds, gather = c[Op::all_gather].seconds;
  if (w.rank() == 0) EXPECT_LT(reduce, kLate / 2) << "the late rank waited for no one";
  else EXPECT_GT(reduce, kLate / 2) << "rank " << w.rank() << " waited for rank 0";
  if (w.rank() == last) EXPECT_LT(gather, kLate / 2) << "the late rank waited for no one";
  else EXPECT_GT(gather, kLate / 2) << "rank " << w.rank() << " waited for rank " << last;
  EXPECT_DOUBLE_EQ(c.seconds(), reduce + gather) << "seconds counted to another operation";
}

// A non-blocking operation running behind computation costs no seconds; only its wait does, or
// the test() that completes it (while the calls of test() that find it pending count nothing).
TEST(Collectives, SecondsLeaveOutTheTimeAnOperationRunsBehindComputation) {
  const Comm w = world().split("behind", 0, world().rank());
  if (w.size() == 1) GTEST_SKIP() << "under mpirun";
  std::vector<float> f(8);
  Request r = w.all_reduce_async(f.data(), 8);
  sleep_for(kLate);  // computation; every rank has joined before any waits
  r.wait();
  EXPECT_LT(w.counters()[Op::all_reduce].seconds, kLate / 2);
  if (w.rank() == 0) sleep_for(kLate);
  Request b = w.broadcast_async(f.data(), 8, 0);
  while (!b.test()) sleep_for(1e-3);
  const double polled = w.counters()[Op::broadcast].seconds;
  EXPECT_GT(polled, 0.0) << "the test() that completed the broadcast counted nothing";
  EXPECT_LT(polled, kLate / 2) << "pending tests counted, or the time the broadcast was in flight";
}

TEST(Grid, RankOrderHasTensorParallelFastestAndPipelineSlowest) {
  const ParallelDims d{.tp = 2, .cp = 3, .ep = 1, .dp = 2, .pp = 2};
  EXPECT_EQ(rank_of(d, {.tp = 1}), 1);
  EXPECT_EQ(rank_of(d, {.cp = 1}), 2);
  EXPECT_EQ(rank_of(d, {.dp = 1}), 6);
  EXPECT_EQ(rank_of(d, {.pp = 1}), 12);
  for (int r = 0; r < d.product(); ++r) EXPECT_EQ(rank_of(d, coord_of(d, r)), r);
}

TEST(Grid, GroupsHoldTheRanksThatDifferAlongOneDimension) {
  const Comm w = world();
  // Every layout of this world size with two named dimensions (or one).
  const int n = w.size();
  const ParallelDims dims = n % 2 == 0 ? ParallelDims{.tp = 2, .dp = n / 2} : ParallelDims{.dp = n};
  const ProcessGrid g(dims, w);
  EXPECT_EQ(g.tp().size(), dims.tp);
  EXPECT_EQ(g.dp().size(), dims.dp);
  EXPECT_EQ(g.pp().size(), 1);
  EXPECT_EQ(g.replica().size(), dims.dp);
  EXPECT_EQ(g.tp().rank(), g.coord().tp);
  EXPECT_EQ(g.dp().rank(), g.coord().dp);
  // The sum of world ranks over each group names its members: tp pairs are consecutive ranks.
  int64_t r = w.rank();
  g.tp().all_reduce(&r, 1);
  const int base = w.rank() - g.coord().tp;
  EXPECT_EQ(r, dims.tp == 2 ? 2 * base + 1 : w.rank());
  int64_t s = w.rank();
  g.dp().all_reduce(&s, 1);
  int64_t want = 0;
  for (int i = 0; i < dims.dp; ++i) want += g.coord().tp + dims.tp * i;
  EXPECT_EQ(s, want);
  // tp_dp: every rank here (no other dimension), ordered tp fastest.
  EXPECT_EQ(g.tp_dp().size(), n);
  EXPECT_EQ(g.tp_dp().rank(), g.coord().tp + dims.tp * g.coord().dp);
  EXPECT_EQ(g.tp_dp().rank(), w.rank());
}

// tp_dp holds the ranks equal in cp, ep and pp; groups() lists every group once, by name.
TEST(Grid, TpDpGroupLeavesTheOtherDimensionsOut) {
  const Comm w = world();
  const int n = w.size();
  const ParallelDims dims = n % 2 == 0 ? ParallelDims{.tp = 2, .cp = n / 2} : ParallelDims{.cp = n};
  const ProcessGrid g(dims, w);
  EXPECT_EQ(g.tp_dp().size(), dims.tp);
  EXPECT_EQ(g.tp_dp().rank(), g.coord().tp);
  int64_t r = w.rank();
  g.tp_dp().all_reduce(&r, 1);
  const int base = w.rank() - g.coord().tp;
  EXPECT_EQ(r, dims.tp == 2 ? 2 * base + 1 : w.rank());
  std::vector<std::string> names;
  for (const Comm* c : g.groups()) names.push_back(c->name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"world", "tp", "cp", "ep", "dp", "pp", "replica", "tp_dp"}));
}

TEST(Grid, RefusesDimsThatDoNotMultiplyToTheWorld) {
  const Comm w = world();
  try {
    ProcessGrid g(ParallelDims{.dp = w.size() + 1}, w);
    FAIL() << "accepted a grid larger than the world";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must multiply to the number of ranks"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("dp" + std::to_string(w.size() + 1)), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace k3::dist
