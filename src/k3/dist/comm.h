// A process group and the collectives k3lab runs on its own buffers. Each operation exists
// blocking and non-blocking; the non-blocking form returns a Request to wait on later, so
// communication can run behind computation. Sums are the only reduction (gradients, counts,
// norms). A group of size 1 runs every collective as a local copy and never calls MPI, so code
// written for a group works unchanged in a plain single-process run.
//
// Running an operation does not change the group (its counters are shared state), so every
// operation is const: a layer runs them through the const grid its Step carries.
//
// Every group counts its calls, payload bytes and seconds per operation (Counters). The payload
// is what this rank hands to the operation: n elements for an all-reduce or a broadcast, the
// whole input for a reduce-scatter, the whole gathered output for an all-gather, the elements sent
// for an all-to-all or a send, the elements received for a receive. The seconds are the wall
// time this rank spent blocked in it: a blocking operation's whole call; a non-blocking one's
// Request::wait() (or the test() that completes it), not the time it ran behind computation. A
// group of size 1 counts calls, and no bytes or seconds.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace k3::dist {

enum class Op { all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send, recv, count };
const char* op_name(Op op);

struct OpCount {
  int64_t calls = 0, bytes = 0;
  double seconds = 0;
};

struct Counters {
  std::array<OpCount, static_cast<size_t>(Op::count)> ops{};
  OpCount& operator[](Op op) { return ops[static_cast<size_t>(op)]; }
  const OpCount& operator[](Op op) const { return ops[static_cast<size_t>(op)]; }
  int64_t bytes() const;
  int64_t calls() const;
  double seconds() const;
};

// Element types the collectives move.
enum class Elem { f32, f64, i32, i64 };
template <typename T>
constexpr Elem elem_of() {
  if constexpr (std::is_same_v<T, float>) return Elem::f32;
  else if constexpr (std::is_same_v<T, double>) return Elem::f64;
  else if constexpr (std::is_same_v<T, int32_t>) return Elem::i32;
  else {
    static_assert(std::is_same_v<T, int64_t>, "collectives move float, double, int32 or int64");
    return Elem::i64;
  }
}

// A pending non-blocking operation. wait() completes it; the destructor waits too, so the
// buffers of an abandoned request are never written after their owner is gone.
class Request {
 public:
  struct State;
  Request();
  explicit Request(std::unique_ptr<State> s);
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  ~Request();

  void wait();
  bool test();  // true once complete (drives progress; cheap)
  bool pending() const;

 private:
  friend class Comm;
  // Adds the seconds since `entered` (a blocking operation's: since its start) to the
  // operation's count, and lets the state go.
  void finish(std::chrono::steady_clock::time_point entered);
  std::unique_ptr<State> s_;
};

void wait_all(std::span<Request> requests);

class Comm {
 public:
  Comm();  // the group of this process alone ("self")
  static Comm world();  // every rank of the job (a group of one without a launcher)
  // How many times world() was called in this process, by any thread. The MPI layers' test
  // binaries tell by it a test that asked for the world from one that did not
  // (tests/common/mpi_main.cpp).
  static int64_t world_requests();

  // The groups of ranks with equal color, ordered by key; collective over this group.
  Comm split(const std::string& name, int color, int key) const;

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const Counters& counters() const { return *counters_; }

  // Sum over the group, in place.
  template <typename T> void all_reduce(T* data, int64_t n) const {
    blocking(all_reduce_async(data, n));
  }
  template <typename T> Request all_reduce_async(T* data, int64_t n) const {
    return start_all_reduce(elem_of<T>(), data, n);
  }
  // `in` holds sum(counts) elements; this rank's out receives the sum of its block, counts[rank].
  template <typename T>
  void reduce_scatter(const T* in, T* out, std::span<const int64_t> counts) const {
    blocking(reduce_scatter_async(in, out, counts));
  }
  template <typename T>
  Request reduce_scatter_async(const T* in, T* out, std::span<const int64_t> counts) const {
    return start_reduce_scatter(elem_of<T>(), in, out, counts);
  }
  // In place: data holds sum(counts) elements, block r at the sum of counts[0..r); each rank
  // contributes its own block and receives everyone else's.
  template <typename T> void all_gather(T* data, std::span<const int64_t> counts) const {
    blocking(all_gather_async(data, counts));
  }
  template <typename T> Request all_gather_async(T* data, std::span<const int64_t> counts) const {
    return start_all_gather(elem_of<T>(), data, counts);
  }
  // Sends send_counts[r] consecutive elements of `in` to rank r; receives recv_counts[r] from r.
  template <typename T>
  void all_to_all(const T* in, std::span<const int64_t> send_counts, T* out,
                  std::span<const int64_t> recv_counts) const {
    blocking(all_to_all_async(in, send_counts, out, recv_counts));
  }
  template <typename T>
  Request all_to_all_async(const T* in, std::span<const int64_t> send_counts, T* out,
                           std::span<const int64_t> recv_counts) const {
    return start_all_to_all(elem_of<T>(), in, send_counts, out, recv_counts);
  }
  template <typename T> void broadcast(T* data, int64_t n, int root) const {
    blocking(broadcast_async(data, n, root));
  }
  template <typename T> Request broadcast_async(T* data, int64_t n, int root) const {
    return start_broadcast(elem_of<T>(), data, n, root);
  }
  template <typename T> void send(const T* data, int64_t n, int to, int tag) const {
    blocking(send_async(data, n, to, tag));
  }
  template <typename T> Request send_async(const T* data, int64_t n, int to, int tag) const {
    return start_send(elem_of<T>(), data, n, to, tag);
  }
  template <typename T> void recv(T* data, int64_t n, int from, int tag) const {
    blocking(recv_async(data, n, from, tag));
  }
  template <typename T> Request recv_async(T* data, int64_t n, int from, int tag) const {
    return start_recv(elem_of<T>(), data, n, from, tag);
  }

  void barrier() const;

 private:
  friend class Window;
  struct Handle;  // the MPI communicator, when the group has more than one rank
  Comm(std::string name, std::shared_ptr<Handle> h);

  Request start_all_reduce(Elem e, void* data, int64_t n) const;
  Request start_reduce_scatter(Elem e, const void* in, void* out, std::span<const int64_t> counts) const;
  Request start_all_gather(Elem e, void* data, std::span<const int64_t> counts) const;
  Request start_all_to_all(Elem e, const void* in, std::span<const int64_t> send_counts, void* out,
                           std::span<const int64_t> recv_counts) const;
  Request start_broadcast(Elem e, void* data, int64_t n, int root) const;
  Request start_send(Elem e, const void* data, int64_t n, int to, int tag) const;
  Request start_recv(Elem e, void* data, int64_t n, int from, int tag) const;
  std::unique_ptr<Request::State> state(Op op) const;  // its clock starts now
  static void blocking(Request r);  // waits, counting the seconds from the operation's start
  void count(Op op, Elem e, int64_t elements) const;
  void check_counts(std::span<const int64_t> counts, const char* what) const;

  std::string name_ = "self";
  int rank_ = 0, size_ = 1;
  std::shared_ptr<Handle> handle_;
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

size_t elem_size(Elem e);

}  // namespace k3::dist
