#include "k3/activation/buffer_pool.h"

#include <algorithm>
#include <cstdlib>

#include "k3/base/arena.h"
#include "k3/base/error.h"

namespace k3::activation {
namespace {
// Buffers below this come from the heap (64-byte aligned); larger ones are mapped (pre-faulted,
// huge-page advised) in whole pages.
constexpr size_t kMapped = size_t{256} << 10;
constexpr size_t kPage = 4096;

void* allocate(size_t bytes) { return bytes < kMapped ? std::aligned_alloc(64, bytes) : map_buffer(bytes); }
void deallocate(void* p, size_t bytes) {
  if (bytes < kMapped)
    std::free(p);
  else
    unmap_buffer(p, bytes);
}
}  // namespace


BufferPool::~BufferPool() {
  for (auto& [size, p] : free_) deallocate(p, size);
  for (auto& [p, size] : used_) deallocate(p, size);
}


size_t BufferPool::pool_bytes(size_t bytes) {
  const size_t unit = bytes < kMapped ? 64 : kPage;
  return std::max<size_t>((bytes + unit - 1) / unit * unit, 64);
}

void* BufferPool::acquire(size_t bytes) {
  bytes = pool_bytes(bytes);
  void* p = nullptr;
  const size_t size = bytes;
  auto it = free_.find(bytes);
  if (it != free_.end()) {
    p = it->second;
    free_.erase(it);
  } else {
    p = allocate(bytes);
    K3_CHECK(p, "cannot allocate ", bytes, " bytes for saved activations");
    reserved_ += bytes;
  }
  used_.emplace(p, size);
  in_use_ += size;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void BufferPool::release(void* p) {
  auto it = used_.find(p);
  K3_CHECK(it != used_.end(), "BufferPool::release: not a buffer of this pool");
  in_use_ -= it->second;
  free_.emplace(it->second, p);
  used_.erase(it);
}

}  // namespace k3::activation
