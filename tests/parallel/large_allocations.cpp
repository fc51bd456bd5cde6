// Replaces the global operator new of test_parallel to count large allocations for
// LargeAllocations; memory comes from malloc / aligned_alloc as in libstdc++, so the library's
// operator delete (free) still matches.
#include "parallel/large_allocations.h"

#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

constexpr std::size_t kPage = 4096;
thread_local bool counting = false;
thread_local int64_t large_count = 0, large_bytes = 0;

void note(std::size_t n) {
  if (counting && n >= kPage) {
    ++large_count;
    large_bytes += static_cast<int64_t>(n);
  }
}

void* allocate(std::size_t n, std::size_t align) {
  note(n);
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return allocate(n, static_cast<std::size_t>(a));
}

namespace k3::testing {

LargeAllocations::LargeAllocations() {
  counting = true;
  large_count = large_bytes = 0;
}
LargeAllocations::~LargeAllocations() { counting = false; }
int64_t LargeAllocations::count() const { return large_count; }
int64_t LargeAllocations::bytes() const { return large_bytes; }

}  // namespace k3::testing
