// MPI start-up and shutdown. Under a launcher (mpirun, srun) the process joins the job's world;
// a plain `k3lab train` is a world of one that never touches MPI, so it needs no launcher.
//
// Failure never hangs: a rank that hits an error calls fail(), which prints one line naming the
// rank and the error and aborts the whole job (MPI_Abort), so every other rank ends within
// seconds instead of waiting in a collective. A rank killed outright (SIGKILL) is detected by the
// launcher, which ends the job the same way.
#pragma once

#include <string>

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

// Prints "k3lab: rank R of N: error: MESSAGE" to stderr and ends the job: MPI_Abort under a
// launcher with more than one rank, exit(status) otherwise. Never returns.
[[noreturn]] void fail(const std::string& message, int status = 1);

// "[rank R] " under a multi-rank job, "" otherwise: the tag every rank's diagnostics carry.
std::string rank_tag();

}  // namespace k3::dist
