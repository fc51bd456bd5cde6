// The offload policy's store in another rank's memory: each rank lends a window of memory
// (activation.peer_mib) to its peer, the rank whose world rank differs in the lowest bit, and
// offloads into the peer's window with one-sided transfers the peer takes no part in. Space in
// the window is taken in order and given back as a whole once nothing is held (a step's
// tensors all come back before the next step starts).
#pragma once

#include <unordered_map>

#include "k3/activation/offload.h"
#include "k3/dist/window.h"

namespace k3::parallel {

class PeerOffload : public activation::OffloadStore {
 public:
  // Collective over `world` (an even number of ranks); each lends `bytes`.
  PeerOffload(const dist::Comm& world, size_t bytes);
  Handle put(const void* src, size_t bytes) override;
  void get(Handle handle, void* dst) override;
  void wait(Handle handle) override;
  void free(Handle handle) override;
  size_t held() const override { return held_; }
  std::string where() const override;

 private:
  struct Held {
    size_t offset, bytes;
    dist::Window::Ticket ticket;
  };
  dist::Window window_;
  int peer_;
  size_t top_ = 0, held_ = 0;
  std::unordered_map<Handle, Held> slots_;
  Handle next_ = 0;
};

}  // namespace k3::parallel
