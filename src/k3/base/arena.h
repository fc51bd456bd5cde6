// One arena per run: a single mapping, 64-byte aligned bump allocation, pre-faulted and backed by
// huge pages where the kernel allows. First touch of a page costs ~10 µs on these machines, so
// memory is mapped once, touched once and reused (reset / rewind), never returned mid-run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace k3 {

class Arena {
 public:
  static constexpr size_t kAlign = 64;

  Arena() = default;
  // prefault = false reserves address space only (pages are faulted in on first use, then reused).
  explicit Arena(size_t capacity_bytes, bool prefault = true);
  // An arena over memory someone else owns (a region of ArenaRegions); never unmapped by it.
  static Arena over(void* base, size_t capacity_bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;

  // 64-byte aligned, uninitialized. Throws k3::Error when the arena is full.
  void* allocate(size_t bytes);
  template <typename T>
  T* allocate_array(size_t count) {
    return static_cast<T*>(allocate(count * sizeof(T)));
  }

  // A position to come back to: everything allocated after mark() is freed by rewind().
  size_t mark() const { return used_; }
  void rewind(size_t mark);
  void reset() { used_ = 0; }

  size_t used() const { return used_; }
  size_t peak() const { return peak_; }  // the most used since construction or reset_peak()
  void reset_peak() { peak_ = used_; }
  // Where p lies in the arena: an offset from its start, or -1 outside it.
  int64_t offset_of(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + capacity_ ? c - base_ : -1;
  }

 private:
  void release();
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  bool owns_ = true;
};

// One mapping cut into equal arenas, one per micro-batch in flight: a micro-batch allocates its
// activations from its region in forward and the region is reset when its backward is done, while
// the other regions stay alive. The mapping is reserved once; each page is faulted on first use
// and then reused, as in a single arena.
class ArenaRegions {
 public:
  ArenaRegions(size_t bytes_each, int count, bool prefault = false);
  ~ArenaRegions();
  ArenaRegions(const ArenaRegions&) = delete;
  ArenaRegions& operator=(const ArenaRegions&) = delete;

  Arena& operator[](int i) { return regions_.at(static_cast<size_t>(i)); }
  int count() const { return static_cast<int>(regions_.size()); }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::vector<Arena> regions_;
};

// Rewinds an arena to where it was when the scope began, except for the buffers given to
// keep(): for results whose size the scope's own work decides (so they could not be allocated
// before it). They move down to where the scope began, in the order kept, and the pointers
// passed to keep() are updated.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& a) : arena_(a), mark_(a.mark()) {}
  ~ArenaScope();
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

  // `p`, allocated in this scope after the buffers kept before it, outlives the scope.
  template <typename T>
  void keep(T*& p, size_t count) {
    keep_bytes(reinterpret_cast<void**>(&p), count * sizeof(T));
  }

 private:
  void keep_bytes(void** p, size_t bytes);
  struct Kept {
    void** p;
    size_t bytes;
  };
  Arena& arena_;
  size_t mark_;
  std::vector<Kept> kept_;
};

// Page-aligned, pre-faulted, huge-page-advised memory for long-lived buffers outside an arena.
void* map_buffer(size_t bytes, bool prefault = true);
void unmap_buffer(void* p, size_t bytes);

}  // namespace k3
