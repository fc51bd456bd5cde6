// A pool of pre-warmed sandboxes of one image, backend and limits: started ahead of time by
// background threads, so that the latency a user sees is the exec, not the setup. A sandbox
// leaves the pool for good when acquired (never reused after someone ran in it); the pool starts
// another in its place. A used sandbox may be handed back to be destroyed by the same background
// threads, so that the teardown is not on the caller's path either.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "k3/sandbox/sandbox.h"

namespace k3::sandbox {

class Pool {
 public:
  // Keeps up to WARM idle sandboxes, started by REFILL_THREADS threads.
  Pool(Backend& backend, Image image, Limits limits, size_t warm, int refill_threads = 1);
  ~Pool();  // stops refilling and destroys the idle sandboxes
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // A warm sandbox if one is ready, else one started now (a "miss").
  std::unique_ptr<Sandbox> acquire();
  // Destroys SANDBOX in the background (before any new sandbox is started; at once, in the
  // caller, for a pool without warm sandboxes, which has no background threads); the pool's
  // destructor waits for it.
  void retire(std::unique_ptr<Sandbox> sandbox);
  // Waits until WARM sandboxes are idle (or the pool fails to start them) and every retired one
  // is destroyed; for benchmarks and tests.
  void wait_until_full();

  const Image& image() const { return image_; }
  const Limits& limits() const { return limits_; }
  size_t idle() const;
  size_t hits() const;
  size_t misses() const;
  std::string last_error() const;  // why the last background start failed, or ""

 private:
  void refill();
  Backend& backend_;
  Image image_;
  Limits limits_;
  size_t warm_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Sandbox>> idle_, retired_;
  size_t starting_ = 0, destroying_ = 0, hits_ = 0, misses_ = 0, failures_in_a_row_ = 0;
  std::string last_error_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace k3::sandbox
