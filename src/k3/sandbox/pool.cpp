#include "k3/sandbox/pool.h"

#include <chrono>

namespace k3::sandbox {

namespace {
constexpr size_t kGiveUpAfterFailures = 3;  // in a row: the pool stops retrying until acquired
}

Pool::Pool(Backend& backend, Image image, Limits limits, size_t warm, int refill_threads)
    : backend_(backend), image_(std::move(image)), limits_(limits), warm_(warm) {
  for (int i = 0; i < refill_threads && warm_ > 0; ++i) threads_.emplace_back([this] { refill(); });
}

Pool::~Pool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
  retired_.clear();  // each sandbox's destructor destroys it
  idle_.clear();
}

void Pool::retire(std::unique_ptr<Sandbox> sandbox) {
  if (threads_.empty()) return;  // no background threads: destroyed here, now
  {
    std::lock_guard lock(mutex_);
    retired_.push_back(std::move(sandbox));
  }
  changed_.notify_all();
}

void Pool::refill() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      return stopping_ || !retired_.empty() ||
             (idle_.size() + starting_ < warm_ && failures_in_a_row_ < kGiveUpAfterFailures);
    });
    if (stopping_) return;
    if (!retired_.empty()) {
      auto s = std::move(retired_.front());
      retired_.pop_front();
      ++destroying_;
      lock.unlock();
      s.reset();  // destroys it
      lock.lock();
      --destroying_;
      changed_.notify_all();
      continue;
    }
    ++starting_;
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

std::unique_ptr<Sandbox> Pool::acquire() {
  {
    std::lock_guard lock(mutex_);
    failures_in_a_row_ = 0;  // someone wants one: try again
    if (!idle_.empty()) {
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
    return (retired_.empty() && destroying_ == 0 &&
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

std::string Pool::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace k3::sandbox
