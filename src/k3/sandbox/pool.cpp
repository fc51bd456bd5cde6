#include "k3/sandbox/pool.h"

#include <algorithm>
#include <chrono>

namespace k3::sandbox {

namespace {
constexpr size_t kGiveUpAfterFailures = 3;  // in a row: the pool stops retrying until acquired
}

Pool::Pool(Backend& backend, Image image, Limits limits, size_t warm, int refill_threads,
           size_t max_uses, Room room)
    : backend_(backend),
      image_(std::move(image)),
      limits_(limits),
      warm_(warm),
      max_uses_(std::max<size_t>(max_uses, 1)),
      room_(std::move(room)) {
  for (int i = 0; i < refill_threads && warm_ > 0; ++i) threads_.emplace_back([this] { refill(); });
}

Pool::~Pool() { stop(); }

void Pool::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  std::deque<std::unique_ptr<Sandbox>> idle, released;
  {
    std::lock_guard lock(mutex_);
    idle.swap(idle_);
    released.swap(released_);
  }
  // Each sandbox's destructor destroys it, here, outside the lock.
}

void Pool::release(std::unique_ptr<Sandbox> sandbox) {
  {
    std::lock_guard lock(mutex_);
    if (threads_.empty() || stopping_) return;  // no background threads: destroyed here, now
    released_.push_back(std::move(sandbox));
  }
  changed_.notify_all();
}

void Pool::refill() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      return stopping_ || !released_.empty() ||
             (idle_.size() + asking_ + starting_ + recycling_ < warm_ + claimed_ &&
              failures_in_a_row_ < kGiveUpAfterFailures);
    });
    if (stopping_) return;
    if (!released_.empty()) {
      auto s = std::move(released_.front());
      released_.pop_front();
      ++recycling_;
      lock.unlock();
      // Back to the idle ones even past WARM: their number is still bounded by the users', and a
      // sandbox destroyed here would only be started again for the next one. A failed reset is
      // a destroy.
      bool clean = false;
      try {
        clean = s->resets() + 1 < max_uses_ && s->reset();
      } catch (const std::exception&) {
      }
      if (!clean) s.reset();  // destroys it
      lock.lock();
      --recycling_;
      if (s) {
        idle_.push_front(std::move(s));  // next out: no sandbox sits idle while another is used
        ++reused_;
      }
      changed_.notify_all();
      continue;
    }
    if (room_) {  // the owner's cap: without room, no more until someone acquires
      ++asking_;
      lock.unlock();
      const bool room = room_([this] {
        std::lock_guard starting_lock(mutex_);
        --asking_;
        ++starting_;
      });
      lock.lock();
      if (!room) {
        --asking_;
        if (stopping_) return;
        failures_in_a_row_ = kGiveUpAfterFailures;
        last_error_ = "no room under the owner's cap on live sandboxes";
        changed_.notify_all();
        continue;
      }
      if (stopping_) {
        --starting_;
        return;
      }
    } else {
      ++starting_;
    }
    lock.unlock();
    std::unique_ptr<Sandbox> s;
    std::string error;
    try {
      s = backend_.create(image_, limits_);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    --starting_;
    if (s) {
      failures_in_a_row_ = 0;
      idle_.push_back(std::move(s));
    } else {
      ++failures_in_a_row_;
      last_error_ = error;
    }
    changed_.notify_all();
  }
}

bool Pool::claim() {
  std::lock_guard lock(mutex_);
  if (idle_.size() + starting_ <= claimed_) return false;
  ++claimed_;
  return true;
}

std::unique_ptr<Sandbox> Pool::acquire(bool claimed) {
  {
    std::unique_lock lock(mutex_);
    failures_in_a_row_ = 0;  // someone wants one: try again
    if (claimed) {
      // Each claim is met by an idle or starting sandbox: wait for one while enough are started.
      changed_.wait(lock, [&] { return !idle_.empty() || idle_.size() + starting_ < claimed_; });
      --claimed_;
    }
    if (idle_.size() > (claimed ? 0 : claimed_)) {  // unclaimed: never one reserved for another
      auto s = std::move(idle_.front());
      idle_.pop_front();
      ++hits_;
      changed_.notify_all();
      return s;
    }
    ++misses_;
  }
  changed_.notify_all();
  return backend_.create(image_, limits_);
}

void Pool::wait_until_full() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] {
    return (released_.empty() && recycling_ == 0 &&
            (idle_.size() >= warm_ || failures_in_a_row_ >= kGiveUpAfterFailures)) ||
           stopping_;
  });
}

size_t Pool::idle() const {
  std::lock_guard lock(mutex_);
  return idle_.size();
}

size_t Pool::hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}

size_t Pool::misses() const {
  std::lock_guard lock(mutex_);
  return misses_;
}

size_t Pool::held() const {
  std::lock_guard lock(mutex_);
  return idle_.size() + asking_ + starting_ + released_.size() + recycling_;
}

size_t Pool::asking() const {
  std::lock_guard lock(mutex_);
  return asking_;
}

size_t Pool::reused() const {
  std::lock_guard lock(mutex_);
  return reused_;
}

std::string Pool::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace k3::sandbox
