// Where the offload policy sends saved tensors: the host (HostOffload, a background thread
// copying into host buffers) or, under MPI, a peer rank's memory (parallel/offload). A transfer
// starts at once and overlaps the caller's work until it is waited for. One thread calls a store.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "k3/activation/buffer_pool.h"

namespace k3::activation {

class OffloadStore {
 public:
  using Handle = int64_t;
  virtual ~OffloadStore() = default;
  // Starts copying `bytes` from `src` out; src must stay unchanged until wait(handle).
  virtual Handle put(const void* src, size_t bytes) = 0;
  // Starts copying what `handle` holds back into `dst`; dst is written until wait(handle).
  virtual void get(Handle handle, void* dst) = 0;
  virtual void wait(Handle handle) = 0;  // the handle's last transfer is done
  virtual void free(Handle handle) = 0;  // forgets it (after its transfers are waited for)
  virtual size_t held() const = 0;       // bytes held out there now
  virtual std::string where() const = 0;  // "host", "rank 1"
};

// Host memory: buffers from a pool of its own, filled and read back by one worker thread in the
// order the transfers were started.
class HostOffload : public OffloadStore {
 public:
  HostOffload();
  ~HostOffload() override;
  Handle put(const void* src, size_t bytes) override;
  void get(Handle handle, void* dst) override;
  void wait(Handle handle) override;
  void free(Handle handle) override;
  size_t held() const override { return host_.in_use(); }
  std::string where() const override { return "host"; }

 private:
  struct Held {
    void* host;
    size_t bytes;
    int64_t ticket;  // of its last transfer
  };
  int64_t start(std::function<void()> copy);
  void run();

  BufferPool host_;
  std::unordered_map<Handle, Held> held_;
  Handle next_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  int64_t queued_ = 0, done_ = 0;  // transfer tickets: the n-th started is done once done_ >= n
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace k3::activation
