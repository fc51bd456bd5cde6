// MPI start-up and shutdown. Under a launcher (mpirun, srun) the process joins the job's world;
// a plain `k3lab train` is a world of one that never touches MPI, so it needs no launcher.
//
// Failure never hangs and is said once: a rank that hits an error calls fail(). When every rank
// fails (a refused config or layout, found alike by all), rank 0 alone prints the error and all
// ranks exit with the status; otherwise the lowest failing rank prints it and aborts the whole job
// (MPI_Abort), so no rank waits forever in a collective. A rank killed outright (SIGKILL) is
// detected by the launcher, which stops the others (SIGTERM, then SIGKILL); ended_ranks_here()
// lets a survivor tell that case from a stop request.
#pragma once

#include <string>
#include <vector>

namespace k3::dist {

// True when this process was started by an MPI launcher (the environment it sets says so).
bool launched_by_mpi();

class Runtime {
 public:
  // Initializes MPI when launched by one (once per process; later instances share it).
  Runtime(int* argc, char*** argv);
  ~Runtime();  // MPI_Finalize when this instance initialized it
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  static bool active();  // MPI is initialized and not finalized
  static int world_rank();
  static int world_size();
  static int ranks_on_this_machine();  // 1 without a launcher

 private:
  bool owns_ = false;
};

// Ends the job over an error: one line "k3lab: rank R of N: error: MESSAGE" on stderr from the
// lowest failing rank ("k3lab: error: MESSAGE" in a world of one), then exit(status) when every
// rank fails within a couple of seconds, MPI_Abort otherwise. Never returns.
[[noreturn]] void fail(const std::string& message, int status = 1);

// World ranks on this machine whose process has ended (reaped by the launcher), in order. Makes
// no MPI call, so any thread may ask.
std::vector<int> ended_ranks_here();

// True when every lower world rank on this machine has ended: this rank speaks for the machine.
bool first_live_rank_here();

// This machine's name (gethostname), as a hostfile names it.
std::string host_name();

// "[rank R] " under a multi-rank job, "" otherwise: the tag every rank's diagnostics carry.
std::string rank_tag();

}  // namespace k3::dist
