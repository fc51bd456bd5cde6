// Stop signals arriving while GEMMs run leave the heap and the results intact. The JIT-compiled
// f32 GEMM of some oneDNN versions points the stack pointer into a heap buffer: a signal frame
// pushed on a compute thread then overwrites whatever lies below it in the heap. The signals are
// therefore taken by a watcher thread (base/stop_signals.h), never by a thread that computes.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <random>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "k3/base/stop_signals.h"
#include "k3/kernels/gemm.h"

namespace k3 {
namespace {

// Routed before the first test of this binary runs, as main() routes them before anything
// starts a thread: a GEMM pool that an earlier test started would keep the signals unblocked and
// could take one on a compute thread.
class RouteStopSignals : public ::testing::Environment {
 public:
  void SetUp() override { route_stop_signals(); }
};
[[maybe_unused]] const ::testing::Environment* const kRouteStopSignals =
    ::testing::AddGlobalTestEnvironment(new RouteStopSignals);

TEST(StopSignalsDuringGemm, HeapAndResultsStayIntact) {
  constexpr int64_t M = 256, N = 384, K = 192;
  const auto A = testing::random_vec(M * K, 1), B = testing::random_vec(N * K, 2);
  std::vector<float> want(M * N), C(M * N);
  kernels::gemm(false, true, M, N, K, 1.0f, A.data(), B.data(), 0.0f, want.data());

  constexpr int kRounds = 200;
  std::atomic<int> listening{0};  // the round whose StopSignals is alive
  std::atomic<int64_t> round_gemms{0};  // GEMMs done in the round that is listening
  std::thread sender([&] {
    sigset_t stop;  // the sender never takes the signals itself: they land on the process
    sigemptyset(&stop);
    for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&stop, s);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::mt19937 rng(7);
    for (int round = 1; round <= kRounds; ++round) {
      // The signal comes after the round's first GEMM, at a random moment of the ones after it,
      // whatever a GEMM takes on this machine.
      while (listening.load() != round || round_gemms.load() == 0) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      kill(getpid(), SIGUSR1);
    }
  });
  int64_t gemms = 0;
  for (int round = 1; round <= kRounds; ++round) {
    StopSignals stop;
    round_gemms.store(0);
    listening.store(round);
    while (stop.requested() == 0) {
      std::vector<float> churn(1 + gemms % 4096, 1.0f);  // heap traffic that a corruption trips
      kernels::gemm(false, true, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data());
      ASSERT_EQ(C, want) << "round " << round << ", GEMM " << gemms;
      ASSERT_EQ(churn.back(), 1.0f);
      ++gemms;
      ++round_gemms;
    }
    EXPECT_EQ(stop.requested(), SIGUSR1);
  }
  sender.join();
  EXPECT_GE(gemms, 2 * kRounds);  // every signal arrived while a GEMM after the first ran
}

}  // namespace
}  // namespace k3
