#include "k3/sweep/split.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::sweep {
namespace {

// Measurements as on a 2-core host with a small model: per job, 1 thread alone 6,000 tok/s, 1
// thread beside another job 5,300, 2 threads 6,570 (threads barely help). CALLS: what was asked.
MeasureSplit two_core_host(std::vector<Split>& calls) {
  return [&calls](int64_t jobs, int64_t threads) {
    calls.push_back({jobs, threads});
    const double each = threads == 2 ? 6570.0 : jobs == 1 ? 6000.0 : 5300.0;
    return std::vector<double>(static_cast<size_t>(jobs), each);
  };
}

TEST(SweepSplit, CandidatesFillTheCores) {
  EXPECT_EQ(candidate_splits(2, {}, {}), (std::vector<Split>{{2, 1}, {1, 2}}));
  EXPECT_EQ(candidate_splits(8, {}, {}), (std::vector<Split>{{8, 1}, {4, 2}, {2, 4}, {1, 8}}));
  EXPECT_EQ(candidate_splits(1, {}, {}), (std::vector<Split>{{1, 1}}));
  EXPECT_EQ(candidate_splits(8, 2, {}), (std::vector<Split>{{2, 4}}));  // threads fill the rest
  EXPECT_EQ(candidate_splits(8, {}, 3), (std::vector<Split>{{2, 3}}));
  EXPECT_EQ(candidate_splits(2, {}, 4), (std::vector<Split>{{1, 4}}));  // at least one job
  EXPECT_EQ(candidate_splits(8, 3, 5), (std::vector<Split>{{3, 5}}));   // both given: as given
}

TEST(SweepSplit, TheHighestAggregateWins) {
  std::vector<Split> calls;
  const SplitChoice c = choose_split({{2, 1}, {1, 2}}, 10, two_core_host(calls));
  EXPECT_EQ(calls, (std::vector<Split>{{2, 1}, {1, 2}}));
  EXPECT_EQ(c.split, (Split{2, 1}));
  ASSERT_EQ(c.measured.size(), 2u);
  EXPECT_DOUBLE_EQ(c.measured[0].aggregate(), 10600.0);
  EXPECT_DOUBLE_EQ(c.measured[1].aggregate(), 6570.0);
}

// One job left: two slots would run it alone on one thread, so 2 x 1 counts one 1-thread job.
TEST(SweepSplit, ACandidateCountsOnlyTheJobsItCanUse) {
  std::vector<Split> calls;
  const SplitChoice c = choose_split({{2, 1}, {1, 2}}, 1, two_core_host(calls));
  EXPECT_EQ(calls, (std::vector<Split>{{1, 1}, {1, 2}}));
  EXPECT_DOUBLE_EQ(c.measured[0].aggregate(), 6000.0);
  EXPECT_EQ(c.split, (Split{1, 2}));
  // Three jobs left on 8 cores: 8 x 1 and 4 x 2 run three probes, 2 x 4 two.
  calls.clear();
  choose_split(candidate_splits(8, {}, {}), 3, [&](int64_t jobs, int64_t threads) {
    calls.push_back({jobs, threads});
    return std::vector<double>(static_cast<size_t>(jobs), 1.0);
  });
  EXPECT_EQ(calls, (std::vector<Split>{{3, 1}, {3, 2}, {2, 4}, {1, 8}}));
}

TEST(SweepSplit, ATieGoesToFewerJobs) {
  const MeasureSplit even = [](int64_t jobs, int64_t) {
    return std::vector<double>(static_cast<size_t>(jobs), 6000.0 / static_cast<double>(jobs));
  };
  EXPECT_EQ(choose_split({{2, 1}, {1, 2}}, 10, even).split, (Split{1, 2}));
  EXPECT_EQ(choose_split({{1, 2}, {2, 1}}, 10, even).split, (Split{1, 2}));
}

TEST(SweepSplit, OneCandidateIsTakenUnmeasured) {
  bool measured = false;
  const SplitChoice c = choose_split({{2, 4}}, 10, [&](int64_t, int64_t) {
    measured = true;
    return std::vector<double>{};
  });
  EXPECT_FALSE(measured);
  EXPECT_EQ(c.split, (Split{2, 4}));
  EXPECT_TRUE(c.measured.empty());
}

TEST(SweepSplit, TheLineAndTheRecord) {
  std::vector<Split> calls;
  SplitChoice c = choose_split({{2, 1}, {1, 2}}, 10, two_core_host(calls));
  c.cores = 2;
  c.measured_on = "a, N 7152";
  EXPECT_EQ(describe(c),
            "sweep: 2 jobs x 1 thread (aggregate 10600 tok/s; 1 x 2: 6570 tok/s), measured on "
            "a, N 7152");
  const std::string path = ::testing::TempDir() + "/k3-split-test.json";
  write_file_atomic(path, split_json(c));
  EXPECT_EQ(read_split(path), (Split{2, 1}));
  write_file_atomic(path, "{\"jobs\": 0, \"threads\": 1}");
  EXPECT_THROW(read_split(path), Error);
  write_file_atomic(path, "{\"jobs\": 2}");
  EXPECT_THROW(read_split(path), Error);
  std::filesystem::remove(path);
  SplitChoice one = choose_split({{1, 1}}, 10, {});
  one.cores = 1;
  EXPECT_EQ(describe(one), "sweep: 1 job x 1 thread, filling 1 core");
}

}  // namespace
}  // namespace k3::sweep
