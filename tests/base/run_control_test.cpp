// The run-control pieces of base/: the directory lock and the stop signals.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "common/test_util.h"
#include "k3/base/dir_lock.h"
#include "k3/base/error.h"
#include "k3/base/stop_signals.h"

namespace k3 {
namespace {

// flock locks belong to an open file: a second lock of the directory fails even in this process.
TEST(DirLock, SecondOwnerIsRefusedNamingTheFirst) {
  testing::TempDir dir{"k3_dir_lock"};
  {
    DirLock first(dir.path(), "k3lab train");
    try {
      DirLock second(dir.path(), "k3lab train");
      FAIL() << "a second lock of the same directory was granted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("in use by process " + std::to_string(::getpid()) + " (k3lab train)"),
                std::string::npos)
          << what;
      EXPECT_EQ(e.context().file, dir.path());
    }
  }
  EXPECT_NO_THROW(DirLock again(dir.path(), "k3lab train"));  // released with its owner
}

TEST(DirLock, MissingDirectoryIsNamed) {
  testing::TempDir dir{"k3_dir_lock"};
  EXPECT_THROW(DirLock(dir.path() + "/missing", "test"), Error);
}

TEST(StopSignals, FirstSignalIsRecordedAndAnOwnerStartsFresh) {
  const auto wait_for_request = [](const StopSignals& stop) {
    // The watcher thread takes the signal: wait for it, a bounded time.
    for (int i = 0; i < 5000 && stop.requested() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return stop.requested();
  };
  {
    StopSignals stop;
    EXPECT_EQ(stop.requested(), 0);
    kill(getpid(), SIGUSR1);
    EXPECT_EQ(wait_for_request(stop), SIGUSR1);
    EXPECT_STREQ(signal_name(stop.requested()), "SIGUSR1");
    EXPECT_THROW(StopSignals twice, Error);
  }
  StopSignals fresh;  // a new owner starts with no request
  EXPECT_EQ(fresh.requested(), 0);
  kill(getpid(), SIGTERM);
  EXPECT_EQ(wait_for_request(fresh), SIGTERM);
}

TEST(StopNote, RunsOnTheWatcherWhenARequestIsRecorded) {
  std::atomic<int> notes{0};
  StopSignals stop;
  {
    StopNote note([&] { notes.fetch_add(1); });
    kill(getpid(), SIGUSR1);
    for (int i = 0; i < 5000 && notes.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(notes.load(), 1);
    EXPECT_THROW(StopNote twice([] {}), Error);
  }
  StopNote after([] {});  // the first one is gone
}

}  // namespace
}  // namespace k3
