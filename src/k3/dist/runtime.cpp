#include "k3/dist/runtime.h"

#include <mpi.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "k3/base/error.h"
#include "k3/dist/peers.h"

namespace k3::dist {
namespace {

// Failures meet on a communicator of their own, so a failing rank never matches a collective
// that another rank is still in.
MPI_Comm g_fail_comm = MPI_COMM_NULL;
constexpr int kFailedTag = 1;
// How long a failing rank waits for every other rank to fail too before it aborts the job: an
// error every rank finds alike (a pre-flight check) reaches them all well within it.
constexpr auto kAgreeWait = std::chrono::seconds(2);

struct Peer {
  int rank;
  pid_t pid;
};
int g_ranks_here = 1;
std::vector<Peer> g_peers_here;  // the ranks on this machine whose process this one can see

void learn_peers_here() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &g_ranks_here);
  const int mine[2] = {Runtime::world_rank(), static_cast<int>(getpid())};
  std::vector<int> all(2 * static_cast<size_t>(g_ranks_here));
  MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, node);
  MPI_Comm_free(&node);
  // A rank in another pid namespace (a container per rank) is left out: its pid means nothing here.
  for (size_t i = 0; i < all.size(); i += 2)
    if (kill(all[i + 1], 0) == 0) g_peers_here.push_back({all[i], all[i + 1]});
}

bool ended(const Peer& p) { return kill(p.pid, 0) != 0 && errno == ESRCH; }

void print_error(const std::string& message) {
  const int n = Runtime::world_size();
  const std::string line =
      (n > 1 ? "k3lab: rank " + std::to_string(Runtime::world_rank()) + " of " +
                   std::to_string(n) + ": error: "
             : std::string("k3lab: error: ")) +
      message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

// Tells every higher rank that this one failed (eager messages that need no receiver to post).
void announce_failure() {
  static int rank = Runtime::world_rank();
  for (int r = rank + 1; r < Runtime::world_size(); ++r) {
    MPI_Request sent;
    MPI_Isend(&rank, 1, MPI_INT, r, kFailedTag, g_fail_comm, &sent);
    MPI_Request_free(&sent);
  }
}

bool lower_rank_failed() {
  int found = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, kFailedTag, g_fail_comm, &found, MPI_STATUS_IGNORE);
  return found;
}

bool wait_for(MPI_Request& request, std::chrono::steady_clock::duration limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int done = 0;
  while (!done && std::chrono::steady_clock::now() < until) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done;
}

// Every rank failed: rank 0 alone says why, and all leave with STATUS. The barrier keeps any rank
// from exiting, which ends the job, before the line is out.
[[noreturn]] void fail_together(const std::string& message, int status) {
  if (Runtime::world_rank() == 0) print_error(message);
  MPI_Barrier(g_fail_comm);
  std::exit(status);
}

}  // namespace

bool launched_by_mpi() {
  // Open MPI's mpirun, PMIx launchers (srun --mpi=pmix) and PMI-1/2 launchers (MPICH, srun).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

Runtime::Runtime(int* argc, char*** argv) {
  if (!launched_by_mpi() || active()) return;
  int provided = 0;
  // Only the main thread calls MPI; OpenMP threads inside kernels never do.
  K3_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
           "MPI_Init_thread failed");
  // Errors in MPI calls abort the job (the default for MPI_COMM_WORLD, stated here on purpose).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_fail_comm);
  learn_peers_here();
  start_peer_listener();
  owns_ = true;
}

Runtime::~Runtime() {
  if (owns_ && active()) MPI_Finalize();
}

bool Runtime::active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

int Runtime::world_rank() {
  int r = 0;
  if (active()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int Runtime::world_size() {
  int n = 1;
  if (active()) MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int Runtime::ranks_on_this_machine() { return active() ? g_ranks_here : 1; }

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "(unknown host)";
  return name;
}

std::string rank_tag() {
  return Runtime::world_size() > 1 ? "[rank " + std::to_string(Runtime::world_rank()) + "] " : "";
}

void fail(const std::string& message, int status) {
  std::fflush(stdout);
  if (Runtime::world_size() == 1) {
    print_error(message);
    std::exit(status);
  }
  announce_failure();
  MPI_Request all_failed;
  MPI_Ibarrier(g_fail_comm, &all_failed);
  if (wait_for(all_failed, kAgreeWait)) fail_together(message, status);
  if (!lower_rank_failed()) {
    print_error(message);
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  // A lower rank failed too: it speaks and ends the job (or, should the remaining ranks fail
  // just now, all leave together).
  MPI_Wait(&all_failed, MPI_STATUS_IGNORE);
  fail_together(message, status);
}

std::vector<int> ended_ranks_here() {
  std::vector<int> out;
  for (const Peer& p : g_peers_here)
    if (ended(p)) out.push_back(p.rank);
  return out;
}

bool first_live_rank_here() {
  for (const Peer& p : g_peers_here)
    if (p.rank < Runtime::world_rank() && !ended(p)) return false;
  return true;
}

}  // namespace k3::dist
