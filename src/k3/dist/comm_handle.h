// The MPI communicator behind a Comm, for the files of this folder that call MPI on it.
#pragma once

#include <mpi.h>

#include "k3/dist/comm.h"
#include "k3/dist/runtime.h"

namespace k3::dist {

struct Comm::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;
  ~Handle() {
    if (owned && Runtime::active()) MPI_Comm_free(&comm);
  }
};

}  // namespace k3::dist
