#include "k3/dist/window.h"

#include <climits>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "k3/base/error.h"
#include "k3/dist/comm_handle.h"

namespace k3::dist {

struct Window::State {
  MPI_Win win = MPI_WIN_NULL;
  void* base = nullptr;
  Ticket next = 0;
  // A ticket's requests, and for a put the target to flush once they are complete.
  struct Pending {
    std::vector<MPI_Request> requests;
    int flush = -1;
  };
  std::unordered_map<Ticket, Pending> pending;
  std::vector<char> local;  // a group of one: the memory itself
};

Window::Window(const Comm& comm, size_t bytes)
    : comm_(comm), bytes_(bytes), s_(std::make_unique<State>()) {
  if (!comm_.handle_) {
    s_->local.resize(bytes);
    return;
  }
  K3_CHECK(MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL, comm_.handle_->comm,
                            &s_->base, &s_->win) == MPI_SUCCESS,
           "MPI_Win_allocate of ", bytes, " bytes failed on group ", comm_.name());
  MPI_Win_lock_all(MPI_MODE_NOCHECK, s_->win);
}

Window::~Window() {
  if (s_->win == MPI_WIN_NULL || !Runtime::active()) return;
  for (auto& [t, p] : s_->pending) MPI_Waitall(static_cast<int>(p.requests.size()),
                                               p.requests.data(), MPI_STATUSES_IGNORE);
  MPI_Win_unlock_all(s_->win);
  MPI_Win_free(&s_->win);
}

namespace {
constexpr size_t kPiece = size_t{1} << 30;  // MPI counts are ints: transfers go in pieces
}

Window::Ticket Window::put(const void* src, size_t bytes, int target, size_t offset) {
  K3_CHECK(target >= 0 && target < comm_.size() && offset + bytes <= bytes_, "Window::put of ",
           bytes, " bytes at ", offset, " on rank ", target, " outside its ", bytes_, " bytes");
  const Ticket t = s_->next++;
  if (!comm_.handle_) {
    std::memcpy(s_->local.data() + offset, src, bytes);
    return t;
  }
  State::Pending& p = s_->pending[t];
  for (size_t at = 0; at < bytes; at += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, bytes - at));
    p.requests.emplace_back();
    MPI_Rput(static_cast<const char*>(src) + at, n, MPI_BYTE, target,
             static_cast<MPI_Aint>(offset + at), n, MPI_BYTE, s_->win, &p.requests.back());
  }
  p.flush = target;
  return t;
}

Window::Ticket Window::get(void* dst, size_t bytes, int target, size_t offset) {
  K3_CHECK(target >= 0 && target < comm_.size() && offset + bytes <= bytes_, "Window::get of ",
           bytes, " bytes at ", offset, " on rank ", target, " outside its ", bytes_, " bytes");
  const Ticket t = s_->next++;
  if (!comm_.handle_) {
    std::memcpy(dst, s_->local.data() + offset, bytes);
    return t;
  }
  State::Pending& p = s_->pending[t];
  for (size_t at = 0; at < bytes; at += kPiece) {
    const int n = static_cast<int>(std::min(kPiece, bytes - at));
    p.requests.emplace_back();
    MPI_Rget(static_cast<char*>(dst) + at, n, MPI_BYTE, target,
             static_cast<MPI_Aint>(offset + at), n, MPI_BYTE, s_->win, &p.requests.back());
  }
  return t;
}

void Window::wait(Ticket t) {
  auto it = s_->pending.find(t);
  if (it == s_->pending.end()) return;  // done (or local)
  State::Pending& p = it->second;
  MPI_Waitall(static_cast<int>(p.requests.size()), p.requests.data(), MPI_STATUSES_IGNORE);
  if (p.flush >= 0) MPI_Win_flush(p.flush, s_->win);  // complete at the target too
  s_->pending.erase(it);
}

}  // namespace k3::dist
