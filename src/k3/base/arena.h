// One arena per run: a single mapping, 64-byte aligned bump allocation, pre-faulted and backed by
// huge pages where the kernel allows. First touch of a page costs ~10 µs on these machines, so
// memory is mapped once, touched once and reused (reset / rewind), never returned mid-run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace k3 {

class Arena {
 public:
  static constexpr size_t kAlign = 64;

  Arena() = default;
  // prefault = false reserves address space only (pages are faulted in on first use, then reused).
  explicit Arena(size_t capacity_bytes, bool prefault = true);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;

  // 64-byte aligned, uninitialized. Throws k3::Error when the arena is full.
  void* allocate(size_t bytes);
  template <typename T>
  T* allocate_array(size_t count) { return static_cast<T*>(allocate(count * sizeof(T))); }

  // A position to come back to: everything allocated after mark() is freed by rewind().
  size_t mark() const { return used_; }
  void rewind(size_t mark);
  void reset() { used_ = 0; }

  size_t used() const { return used_; }
  size_t peak() const { return peak_; }

 private:
  void release();
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
};

// Rewinds an arena to where it was when the scope began.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& a) : arena_(a), mark_(a.mark()) {}
  ~ArenaScope() { arena_.rewind(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& arena_;
  size_t mark_;
};

// Page-aligned, pre-faulted, huge-page-advised memory for long-lived buffers outside an arena.
void* map_buffer(size_t bytes, bool prefault = true);
void unmap_buffer(void* p, size_t bytes);

}  // namespace k3
