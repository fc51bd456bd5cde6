#include "k3/dist/comm.h"

#include <mpi.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <numeric>

#include "k3/base/error.h"
#include "k3/dist/comm_handle.h"
#include "k3/dist/runtime.h"

namespace k3::dist {

using Clock = std::chrono::steady_clock;

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce:
      return "all_reduce";
    case Op::reduce_scatter:
      return "reduce_scatter";
    case Op::all_gather:
      return "all_gather";
    case Op::all_to_all:
      return "all_to_all";
    case Op::broadcast:
      return "broadcast";
    case Op::send:
      return "send";
    case Op::recv:
      return "recv";
    case Op::count:
      break;
  }
  return "?";
}

int64_t Counters::bytes() const {
  int64_t b = 0;
  for (const OpCount& c : ops) b += c.bytes;
  return b;
}

int64_t Counters::calls() const {
  int64_t n = 0;
  for (const OpCount& c : ops) n += c.calls;
  return n;
}

double Counters::seconds() const {
  double s = 0;
  for (const OpCount& c : ops) s += c.seconds;
  return s;
}

size_t elem_size(Elem e) { return e == Elem::f32 || e == Elem::i32 ? 4 : 8; }

namespace {

MPI_Datatype mpi_type(Elem e) {
  switch (e) {
    case Elem::f32:
      return MPI_FLOAT;
    case Elem::f64:
      return MPI_DOUBLE;
    case Elem::i32:
      return MPI_INT32_T;
    case Elem::i64:
      return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

int mpi_count(int64_t n) {
  K3_CHECK(n >= 0 && n <= INT_MAX, "a collective of ", n, " elements exceeds MPI's int count");
  return static_cast<int>(n);
}

}  // namespace

// ---- requests ----

struct Request::State {
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<int> counts, displs, counts2, displs2;  // live until the operation completes
  std::shared_ptr<Counters> counters;
  Op op = Op::count;
  Clock::time_point started;
  bool blocking = false;
};

Request::Request() = default;
Request::Request(std::unique_ptr<State> s) : s_(std::move(s)) {}
Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    wait();
    s_ = std::move(o.s_);
  }
  return *this;
}
Request::~Request() { wait(); }

void Request::wait() {
  if (!s_) return;
  const Clock::time_point entered = Clock::now();
  MPI_Wait(&s_->req, MPI_STATUS_IGNORE);
  finish(entered);
}

bool Request::test() {
  if (!s_) return true;
  const Clock::time_point entered = Clock::now();
  int done = 0;
  MPI_Test(&s_->req, &done, MPI_STATUS_IGNORE);
  if (done) finish(entered);
  return done != 0;
}

void Request::finish(Clock::time_point entered) {
  const Clock::time_point from = s_->blocking ? s_->started : entered;
  (*s_->counters)[s_->op].seconds += std::chrono::duration<double>(Clock::now() - from).count();
  s_.reset();
}

bool Request::pending() const { return s_ != nullptr; }

void wait_all(std::span<Request> requests) {
  for (Request& r : requests) r.wait();
}

// ---- groups ----

Comm::Comm() = default;

Comm::Comm(std::string name, std::shared_ptr<Handle> h)
    : name_(std::move(name)), handle_(std::move(h)) {
  MPI_Comm_rank(handle_->comm, &rank_);
  MPI_Comm_size(handle_->comm, &size_);
}

namespace {
std::atomic<int64_t> g_world_requests{0};
}  // namespace

int64_t Comm::world_requests() { return g_world_requests.load(std::memory_order_relaxed); }

Comm Comm::world() {
  g_world_requests.fetch_add(1, std::memory_order_relaxed);
  if (Runtime::world_size() == 1) {
    Comm c;
    c.name_ = "world";
    return c;
  }
  auto h = std::make_shared<Handle>();
  h->comm = MPI_COMM_WORLD;
  return Comm("world", h);
}

Comm Comm::split(const std::string& name, int color, int key) const {
  if (!handle_) {  // a group of one splits into itself
    Comm c;
    c.name_ = name;
    return c;
  }
  auto h = std::make_shared<Handle>();
  MPI_Comm_split(handle_->comm, color, key, &h->comm);
  h->owned = true;
  int n = 0;
  MPI_Comm_size(h->comm, &n);
  if (n == 1) {  // a group of one needs no MPI communicator
    Comm c;
    c.name_ = name;
    return c;
  }
  return Comm(name, h);
}

void Comm::barrier() const {
  if (handle_) MPI_Barrier(handle_->comm);
}

std::unique_ptr<Request::State> Comm::state(Op op) const {
  auto s = std::make_unique<Request::State>();
  s->counters = counters_;
  s->op = op;
  s->started = Clock::now();
  return s;
}

void Comm::blocking(Request r) {
  if (r.s_) r.s_->blocking = true;
  r.wait();
}

void Comm::count(Op op, Elem e, int64_t elements) const {
  OpCount& c = (*counters_)[op];
  ++c.calls;
  if (size_ > 1) c.bytes += elements * static_cast<int64_t>(elem_size(e));
}

void Comm::check_counts(std::span<const int64_t> counts, const char* what) const {
  K3_CHECK(static_cast<int>(counts.size()) == size_, what, ": ", counts.size(),
           " counts for a group of ", size_, " (", name_, ")");
}

Request Comm::start_all_reduce(Elem e, void* data, int64_t n) const {
  count(Op::all_reduce, e, n);
  if (!handle_) return {};
  auto s = state(Op::all_reduce);
  MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(n), mpi_type(e), MPI_SUM, handle_->comm, &s->req);
  return Request(std::move(s));
}

Request Comm::start_reduce_scatter(Elem e, const void* in, void* out,
                                   std::span<const int64_t> counts) const {
  check_counts(counts, "reduce_scatter");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  count(Op::reduce_scatter, e, total);
  if (!handle_) {
    if (out != in) std::memmove(out, in, static_cast<size_t>(counts[0]) * elem_size(e));
    return {};
  }
  auto s = state(Op::reduce_scatter);
  for (int64_t c : counts) s->counts.push_back(mpi_count(c));
  MPI_Ireduce_scatter(in, out, s->counts.data(), mpi_type(e), MPI_SUM, handle_->comm, &s->req);
  return Request(std::move(s));
}

Request Comm::start_all_gather(Elem e, void* data, std::span<const int64_t> counts) const {
  check_counts(counts, "all_gather");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  count(Op::all_gather, e, total);
  if (!handle_) return {};
  auto s = state(Op::all_gather);
  int64_t at = 0;
  for (int64_t c : counts) {
    s->counts.push_back(mpi_count(c));
    s->displs.push_back(mpi_count(at));
    at += c;
  }
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, s->counts.data(), s->displs.data(),
                  mpi_type(e), handle_->comm, &s->req);
  return Request(std::move(s));
}

Request Comm::start_all_to_all(Elem e, const void* in, std::span<const int64_t> send_counts,
                               void* out, std::span<const int64_t> recv_counts) const {
  check_counts(send_counts, "all_to_all (send counts)");
  check_counts(recv_counts, "all_to_all (receive counts)");
  count(Op::all_to_all, e, std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0}));
  if (!handle_) {
    std::memmove(out, in, static_cast<size_t>(send_counts[0]) * elem_size(e));
    return {};
  }
  auto s = state(Op::all_to_all);
  auto fill = [](std::span<const int64_t> c, std::vector<int>& counts, std::vector<int>& displs) {
    int64_t at = 0;
    for (int64_t x : c) {
      counts.push_back(mpi_count(x));
      displs.push_back(mpi_count(at));
      at += x;
    }
  };
  fill(send_counts, s->counts, s->displs);
  fill(recv_counts, s->counts2, s->displs2);
  // Open MPI takes in == out for an in-place exchange; an empty buffer may sit where the other
  // begins (an arena hands out the same address for 0 bytes and for what follows), so an empty
  // side is given a place of its own.
  static char nothing_in, nothing_out;
  const auto total = [](std::span<const int64_t> c) {
    return std::accumulate(c.begin(), c.end(), int64_t{0});
  };
  if (total(send_counts) == 0) in = &nothing_in;
  if (total(recv_counts) == 0) out = &nothing_out;
  MPI_Ialltoallv(in, s->counts.data(), s->displs.data(), mpi_type(e), out, s->counts2.data(),
                 s->displs2.data(), mpi_type(e), handle_->comm, &s->req);
  return Request(std::move(s));
}

Request Comm::start_broadcast(Elem e, void* data, int64_t n, int root) const {
  count(Op::broadcast, e, n);
  if (!handle_) return {};
  auto s = state(Op::broadcast);
  MPI_Ibcast(data, mpi_count(n), mpi_type(e), root, handle_->comm, &s->req);
  return Request(std::move(s));
}

Request Comm::start_send(Elem e, const void* data, int64_t n, int to, int tag) const {
  K3_CHECK(to >= 0 && to < size_ && to != rank_, "send to rank ", to, " of group ", name_,
           " (size ", size_, ", this rank ", rank_, ")");
  count(Op::send, e, n);
  auto s = state(Op::send);
  MPI_Isend(data, mpi_count(n), mpi_type(e), to, tag, handle_->comm, &s->req);
  return Request(std::move(s));
}

Request Comm::start_recv(Elem e, void* data, int64_t n, int from, int tag) const {
  K3_CHECK(from >= 0 && from < size_ && from != rank_, "receive from rank ", from, " of group ",
           name_, " (size ", size_, ", this rank ", rank_, ")");
  count(Op::recv, e, n);
  auto s = state(Op::recv);
  MPI_Irecv(data, mpi_count(n), mpi_type(e), from, tag, handle_->comm, &s->req);
  return Request(std::move(s));
}

}  // namespace k3::dist
