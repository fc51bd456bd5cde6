// Memory each rank of a group lends the others, written and read by them with one-sided
// transfers (MPI RMA, passive target): the rank that owns the memory takes no part in them.
// Each rank exposes `bytes`; a transfer names the target rank and a byte offset in its memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "k3/dist/comm.h"

namespace k3::dist {

class Window {
 public:
  // Collective over `comm` (as is the destructor): every rank lends `bytes`.
  Window(const Comm& comm, size_t bytes);
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  using Ticket = int64_t;
  // Starts writing `bytes` from src into rank `target`'s memory at `offset`; src must stay
  // unchanged until wait(). The data is in place once waited for.
  Ticket put(const void* src, size_t bytes, int target, size_t offset);
  // Starts reading `bytes` at `offset` of rank `target`'s memory into dst.
  Ticket get(void* dst, size_t bytes, int target, size_t offset);
  void wait(Ticket t);

  size_t bytes() const { return bytes_; }
  const Comm& comm() const { return comm_; }

 private:
  struct State;
  Comm comm_;
  size_t bytes_;
  std::unique_ptr<State> s_;
};

}  // namespace k3::dist
