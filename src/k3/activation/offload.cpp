#include "k3/activation/offload.h"

#include <cstring>

#include "k3/base/error.h"

namespace k3::activation {

HostOffload::HostOffload() : worker_([this] { run(); }) {}

HostOffload::~HostOffload() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HostOffload::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
    ++done_;
    cv_.notify_all();
  }
}

int64_t HostOffload::start(std::function<void()> copy) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.push_back(std::move(copy));
  cv_.notify_all();
  return ++queued_;
}

OffloadStore::Handle HostOffload::put(const void* src, size_t bytes) {
  void* host = host_.acquire(bytes);
  const Handle h = next_++;
  held_[h] = {host, bytes, start([=] { std::memcpy(host, src, bytes); })};
  return h;
}

void HostOffload::get(Handle handle, void* dst) {
  auto it = held_.find(handle);
  K3_CHECK(it != held_.end(), "HostOffload::get: unknown handle ", handle);
  Held& h = it->second;
  h.ticket = start([dst, src = h.host, n = h.bytes] { std::memcpy(dst, src, n); });
}

void HostOffload::wait(Handle handle) {
  auto it = held_.find(handle);
  K3_CHECK(it != held_.end(), "HostOffload::wait: unknown handle ", handle);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ >= it->second.ticket; });
}

void HostOffload::free(Handle handle) {
  auto it = held_.find(handle);
  if (it == held_.end()) return;
  wait(handle);
  host_.release(it->second.host);
  held_.erase(it);
}

}  // namespace k3::activation
