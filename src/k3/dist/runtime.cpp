#include "k3/dist/runtime.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "k3/base/error.h"

namespace k3::dist {

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

int Runtime::ranks_on_this_machine() {
  if (!active()) return 1;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

std::string rank_tag() {
  return Runtime::world_size() > 1 ? "[rank " + std::to_string(Runtime::world_rank()) + "] " : "";
}

void fail(const std::string& message, int status) {
  const int n = Runtime::world_size();
  if (n > 1)
    std::fprintf(stderr, "k3lab: rank %d of %d: error: %s\n", Runtime::world_rank(), n,
                 message.c_str());
  else
    std::fprintf(stderr, "k3lab: error: %s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (n > 1) MPI_Abort(MPI_COMM_WORLD, status);
  std::exit(status);
}

}  // namespace k3::dist
