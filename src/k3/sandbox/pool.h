// A pool of pre-warmed sandboxes of one image, backend and limits: started ahead of time by
// background threads, so that the latency a user sees is the exec, not the setup. An acquired
// sandbox is its user's alone; the pool starts another in its place. A used sandbox handed back
// (released) is reset by the same background threads and goes back to the idle ones, clean and
// proven so (Sandbox::reset); one that cannot be reset, or that was used MAX_USES times, is
// destroyed there instead. Neither reset nor teardown is on the caller's path.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "k3/sandbox/sandbox.h"

namespace k3::sandbox {

class Pool {
 public:
  // How many users a sandbox serves before it is destroyed all the same (a bound on whatever a
  // reset might miss, and on a sandbox's age).
  static constexpr size_t kDefaultMaxUses = 64;

  // Starts sandboxes, by REFILL_THREADS threads, while fewer than WARM are idle (reset ones go
  // back to the idle ones all the same); each serves up to MAX_USES users (1: never reused).
  // ROOM, when given, is asked before each background start, which held() and asking() count
  // while it is asked: false, and the pool starts none until its next acquire (an owner's cap on
  // live sandboxes). Its owner answers under its own lock and, when it answers yes, calls the
  // function it is given under that same lock: the ask becomes a start there, so that no
  // admission of the owner's sees the start as neither.
  using Room = std::function<bool(const std::function<void()>& starting)>;
  Pool(Backend& backend, Image image, Limits limits, size_t warm, int refill_threads = 1,
       size_t max_uses = kDefaultMaxUses, Room room = {});
  ~Pool();  // stop()
  // Stops refilling and destroys the idle and released sandboxes; a sandbox released after is
  // destroyed at once, in the caller. For an owner that drops a pool others may still hold.
  void stop();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Reserves an idle or starting sandbox for an acquire to come, if one is not yet reserved.
  bool claim();
  // A warm sandbox if one is ready, else one started now (a "miss"); CLAIMED (after claim()
  // returned true): the reserved one, waiting for it to start, or if its start fails, a new one.
  std::unique_ptr<Sandbox> acquire(bool claimed = false);
  // Resets SANDBOX for its next user, or destroys it, in the background (before any new sandbox
  // is started; destroyed at once, in the caller, by a pool without warm sandboxes, which has no
  // background threads); the pool's destructor waits for it.
  void release(std::unique_ptr<Sandbox> sandbox);
  // Waits until WARM sandboxes are idle (or the pool fails to start them) and every released one
  // is reset or destroyed; for benchmarks and tests.
  void wait_until_full();

  const Image& image() const { return image_; }
  const Limits& limits() const { return limits_; }
  size_t idle() const;
  size_t hits() const;
  size_t misses() const;
  size_t reused() const;  // released sandboxes that went back to the idle ones
  // Live sandboxes the pool holds: idle, starting, and released ones being reset.
  size_t held() const;
  // Background starts waiting for ROOM's answer (held() counts them): the owner's ROOM, which
  // counts them too, may discount them when it admits a sandbox of its own, since each of them
  // asks after the admission and is refused if no room is left.
  size_t asking() const;
  std::string last_error() const;  // why the last background start failed, or ""

 private:
  void refill();
  Backend& backend_;
  Image image_;
  Limits limits_;
  size_t warm_, max_uses_;
  Room room_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Sandbox>> idle_, released_;
  size_t asking_ = 0, starting_ = 0, recycling_ = 0, claimed_ = 0, hits_ = 0, misses_ = 0,
         reused_ = 0, failures_in_a_row_ = 0;
  std::string last_error_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace k3::sandbox
