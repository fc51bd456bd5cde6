// The --tp option of the commands that only run the model forward.
#include "k3/apps/commands.h"
#include "k3/base/error.h"

namespace k3::apps {

void add_tp_option(CLI::App* cmd, int64_t& tp) {
  cmd->add_option("--tp", tp,
                  "Under mpirun: ranks the model is split over (tensor parallelism); 0, the "
                  "default: every rank of the job");
}

dist::ParallelDims forward_dims(int64_t tp, int world_size) {
  if (tp == 0) tp = world_size;
  K3_CHECK_CTX(tp > 0 && world_size % tp == 0, (ErrorContext{"", "--tp", -1}), "--tp ", tp,
               " does not divide the job's ", world_size, " rank", world_size == 1 ? "" : "s");
  return {.tp = static_cast<int>(tp), .dp = world_size / static_cast<int>(tp)};
}

}  // namespace k3::apps
