#include "k3/parallel/offload/peer_offload.h"

#include "k3/base/error.h"
#include "k3/base/format.h"

namespace k3::parallel {
namespace {

int peer_of(const dist::Comm& world) {
  K3_CHECK(world.size() % 2 == 0, "activation.offload_to = \"peer\" pairs the ranks: it needs an "
           "even number of them, not ", world.size());
  return world.rank() ^ 1;
}

}  // namespace

PeerOffload::PeerOffload(const dist::Comm& world, size_t bytes)
    : window_(world, bytes), peer_(peer_of(world)) {}

std::string PeerOffload::where() const { return "rank " + std::to_string(peer_); }

activation::OffloadStore::Handle PeerOffload::put(const void* src, size_t bytes) {
  const size_t offset = (top_ + 63) / 64 * 64;
  K3_CHECK(offset + bytes <= window_.bytes(), "activation.peer_mib: the peer's ",
           format_bytes(static_cast<double>(window_.bytes())), " cannot hold another ",
           format_bytes(static_cast<double>(bytes)), " (", format_bytes(static_cast<double>(held_)),
           " held); raise it or offload less");
  top_ = offset + bytes;
  held_ += bytes;
  const Handle h = next_++;
  slots_[h] = {offset, bytes, window_.put(src, bytes, peer_, offset)};
  return h;
}

void PeerOffload::get(Handle handle, void* dst) {
  Held& h = slots_.at(handle);
  window_.wait(h.ticket);
  h.ticket = window_.get(dst, h.bytes, peer_, h.offset);
}

void PeerOffload::wait(Handle handle) { window_.wait(slots_.at(handle).ticket); }

void PeerOffload::free(Handle handle) {
  auto it = slots_.find(handle);
  if (it == slots_.end()) return;
  window_.wait(it->second.ticket);
  held_ -= it->second.bytes;
  slots_.erase(it);
  if (slots_.empty()) top_ = 0;
}

}  // namespace k3::parallel
