// The pool of warm sandboxes: hits from it, misses when empty, refills, and hundreds of sandboxes
// at once with nothing left behind.
#include "k3/sandbox/pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <mutex>
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

// The owner's ROOM turns an ask into a start under its own lock: as soon as it has said yes, the
// pool counts that start as starting, not asking, so an admission the owner makes right after
// (which discounts asks, each refused later) still counts it.
TEST_F(SandboxTest, PoolCountsAStartAsStartingOnceItsOwnerGrantsRoom) {
  std::atomic<Pool*> self = nullptr;  // set once constructed; its thread may ask before that
  std::mutex owner;
  std::atomic<int> grants = 0, seen_asking = -1, seen_held = -1;
  Pool pool(*backend_, store_->resolve("host"), Limits{}, 1, 1, Pool::kDefaultMaxUses,
            [&](const std::function<void()>& starting) {
              while (!self.load()) std::this_thread::yield();
              std::lock_guard lock(owner);
              if (grants++ > 0) return false;
              starting();
              seen_asking = int(self.load()->asking());
              seen_held = int(self.load()->held());
              return true;
            });
  self = &pool;
  pool.wait_until_full();
  EXPECT_EQ(grants.load(), 1);
  EXPECT_EQ(seen_asking.load(), 0) << "a granted start still counted as an ask";
  EXPECT_EQ(seen_held.load(), 1);
  EXPECT_EQ(pool.idle(), 1u);
}

// A pool its owner stops while a user still holds one of its sandboxes: the idle ones are gone at
// once, and the held one is destroyed when released, in the caller, not kept warm.
TEST_F(SandboxTest, AStoppedPoolKeepsNothingAlive) {
  Pool pool(*backend_, store_->resolve("host"), Limits{}, 2, 2);
  pool.wait_until_full();
  auto held = pool.acquire();
  pool.stop();
  EXPECT_EQ(pool.held(), 0u);
  EXPECT_EQ(count_agent_processes(), agents_before_ + 1) << "only the user's sandbox is left";
  pool.release(std::move(held));
  EXPECT_EQ(count_agent_processes(), agents_before_);
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
