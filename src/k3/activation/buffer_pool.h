// Buffers for saved tensors outside the step arena, reused step after step: released buffers
// return to a free list by size, so once the first step has mapped (and faulted in) what a step
// needs, later steps map nothing. Small buffers come from the heap, large ones are mapped in
// whole pages. One thread uses a pool.
#pragma once

#include <cstddef>
#include <map>
#include <unordered_map>

namespace k3::activation {

class BufferPool {
 public:
  BufferPool() = default;
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // `bytes` rounded up (64-byte aligned); a free buffer of that size is reused.
  void* acquire(size_t bytes);
  void release(void* p);
  static size_t pool_bytes(size_t bytes);  // what acquire(bytes) takes

  size_t in_use() const { return in_use_; }      // bytes of the buffers handed out
  size_t peak() const { return peak_; }          // the most in use since reset_peak()
  size_t reserved() const { return reserved_; }  // bytes mapped, in use or free
  void reset_peak() { peak_ = in_use_; }

 private:
  std::multimap<size_t, void*> free_;       // by size
  std::unordered_map<void*, size_t> used_;  // buffer -> its size
  size_t in_use_ = 0, peak_ = 0, reserved_ = 0;
};

}  // namespace k3::activation
