#pragma once
// Counts the heap allocations of a page or more (operator new, any alignment) that the calling
// thread makes while a LargeAllocations lives: scratch that should come from an arena but comes
// from the heap shows up here even when the allocator recycles pages and nothing faults.
#include <cstdint>

namespace k3::testing {

class LargeAllocations {
 public:
  LargeAllocations();
  ~LargeAllocations();
  LargeAllocations(const LargeAllocations&) = delete;
  LargeAllocations& operator=(const LargeAllocations&) = delete;
  int64_t count() const;
  int64_t bytes() const;
};

}  // namespace k3::testing
