// The pool of warm sandboxes: hits from it, misses when empty, refills, and hundreds of sandboxes
// at once with nothing left behind.
#include "k3/sandbox/pool.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "fixture.h"

namespace k3::sandbox::testing {
namespace {

TEST_F(SandboxTest, PoolHandsOutWarmSandboxesAndRefills) {
  Pool pool(*backend_, store_->resolve("host"), Limits{}, 3, 2);
  pool.wait_until_full();
  EXPECT_EQ(pool.idle(), 3u);
  EXPECT_EQ(count_agent_processes(), agents_before_ + 3);
  auto a = pool.acquire();
  auto b = pool.acquire();
  EXPECT_EQ(pool.hits(), 2u);
  EXPECT_EQ(sh(*a, "echo $((6*7))").stdout_data, "42\n");
  EXPECT_NE(a->id(), b->id());
  pool.wait_until_full();
  EXPECT_EQ(pool.idle(), 3u) << "the pool started replacements";
  EXPECT_EQ(pool.last_error(), "");
}

TEST_F(SandboxTest, PoolWithoutReuseDestroysReleasedSandboxesInTheBackground) {
  Pool pool(*backend_, store_->resolve("host"), Limits{}, 2, 2, /*max_uses=*/1);
  pool.wait_until_full();
  auto a = pool.acquire();
  EXPECT_EQ(sh(*a, "echo used").stdout_data, "used\n");
  const std::string run = dir_ + "/store/run/" + a->id();
  ASSERT_TRUE(std::filesystem::exists(run));
  pool.release(std::move(a));
  pool.wait_until_full();  // also waits for the released one to be gone
  EXPECT_FALSE(std::filesystem::exists(run));
  EXPECT_EQ(count_agent_processes(), agents_before_ + 2) << "only the warm ones are left";
}

TEST_F(SandboxTest, PoolWithoutWarmSandboxesStartsOnDemand) {
  Pool pool(*backend_, store_->resolve("host"), Limits{}, 0);
  auto s = pool.acquire();
  EXPECT_EQ(pool.misses(), 1u);
  EXPECT_EQ(sh(*s, "echo cold").stdout_data, "cold\n");
}

// Hundreds of namespace sandboxes alive at once, each answering, then all gone.
TEST_F(SandboxTest, HundredsOfConcurrentSandboxes) {
  constexpr int kSandboxes = 200;
  std::vector<std::unique_ptr<Sandbox>> all(kSandboxes);
  std::vector<std::thread> starters;
  for (int t = 0; t < 4; ++t) {
    starters.emplace_back([&, t] {
      for (int i = t; i < kSandboxes; i += 4) all[size_t(i)] = make();
    });
  }
  for (auto& t : starters) t.join();
  EXPECT_EQ(count_agent_processes(), agents_before_ + kSandboxes);
  int answered = 0;
  for (auto& s : all) answered += s->get("/proc/self/status").rfind("Name:", 0) == 0;
  EXPECT_EQ(answered, kSandboxes);
  all.clear();
}

}  // namespace
}  // namespace k3::sandbox::testing
