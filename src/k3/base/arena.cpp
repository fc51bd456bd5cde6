#include "k3/base/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "k3/base/error.h"

namespace k3 {

void* map_buffer(size_t bytes, bool prefault) {
  if (bytes == 0) return nullptr;
  // Without pre-faulting the mapping only reserves address space: pages come on first touch.
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prefault ? 0 : MAP_NORESERVE);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  K3_CHECK(p != MAP_FAILED, "cannot map ", bytes, " bytes: ", std::strerror(errno));
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);  // advisory: ignored where transparent huge pages are off
#endif
  if (prefault) {
    // Touch every page once now, in parallel, instead of on the hot path.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    char* c = static_cast<char*>(p);
    const int64_t pages = static_cast<int64_t>((bytes + page - 1) / page);
#pragma omp parallel for schedule(static) if (pages > 4096)
    for (int64_t i = 0; i < pages; ++i) c[static_cast<size_t>(i) * page] = 0;
  }
  return p;
}

void unmap_buffer(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

Arena::Arena(size_t capacity_bytes, bool prefault)
    : base_(static_cast<char*>(map_buffer(capacity_bytes, prefault))), capacity_(capacity_bytes) {}

Arena Arena::over(void* base, size_t capacity_bytes) {
  Arena a;
  a.base_ = static_cast<char*>(base);
  a.capacity_ = capacity_bytes;
  a.owns_ = false;
  return a;
}

Arena::~Arena() { release(); }

Arena::Arena(Arena&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)),
      used_(std::exchange(o.used_, 0)),
      peak_(std::exchange(o.peak_, 0)),
      owns_(std::exchange(o.owns_, true)) {}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    release();
    base_ = std::exchange(o.base_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    used_ = std::exchange(o.used_, 0);
    peak_ = std::exchange(o.peak_, 0);
    owns_ = std::exchange(o.owns_, true);
  }
  return *this;
}

void Arena::release() {
  if (owns_) unmap_buffer(base_, capacity_);
  base_ = nullptr;
  capacity_ = used_ = 0;
}

void* Arena::allocate(size_t bytes) {
  size_t start = (used_ + kAlign - 1) & ~(kAlign - 1);
  K3_CHECK(start + bytes <= capacity_, "arena exhausted: need ", bytes, " bytes at offset ", start,
           ", capacity ", capacity_, " bytes");
  used_ = start + bytes;
  if (used_ > peak_) peak_ = used_;
  return base_ + start;
}

void Arena::rewind(size_t mark) {
  K3_CHECK(mark <= used_, "arena rewind to ", mark, " beyond used ", used_);
  used_ = mark;
}

void ArenaScope::keep_bytes(void** p, size_t bytes) {
  K3_CHECK(kept_.empty() || *p >= *kept_.back().p, "ArenaScope::keep out of allocation order");
  kept_.push_back({p, bytes});
}

// Each kept buffer moves down (never up: it was allocated at or above where it lands), so a
// memmove in keep order never overwrites one not yet moved.
ArenaScope::~ArenaScope() {
  arena_.rewind(mark_);
  for (const Kept& k : kept_) {
    void* to = arena_.allocate(k.bytes);
    if (to != *k.p) std::memmove(to, *k.p, k.bytes);
    *k.p = to;
  }
}

}  // namespace k3

namespace k3 {

ArenaRegions::ArenaRegions(size_t bytes_each, int count, bool prefault) {
  K3_CHECK(count > 0, "ArenaRegions needs at least one region, got ", count);
  const size_t each = (bytes_each + Arena::kAlign - 1) & ~(Arena::kAlign - 1);
  bytes_ = each * static_cast<size_t>(count);
  base_ = map_buffer(bytes_, prefault);
  for (int i = 0; i < count; ++i)
    regions_.push_back(
        Arena::over(static_cast<char*>(base_) + each * static_cast<size_t>(i), each));
}

ArenaRegions::~ArenaRegions() {
  regions_.clear();
  unmap_buffer(base_, bytes_);
}

}  // namespace k3
