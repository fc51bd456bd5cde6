// When one rank of a job dies (SIGKILL, a crash, an abort), the launcher stops the others: SIGTERM,
// then SIGKILL a second later (Open MPI's default). A survivor is then most likely blocked for good
// in a collective, so the graceful stop that SIGTERM asks for never comes, and without a word the
// user would not know where the run can go on from. PeerLossNote says it, once per machine, as soon
// as the SIGTERM arrives.
#pragma once

#include <string>
#include <vector>

#include "k3/base/stop_signals.h"

namespace k3::train {

// "k3lab: rank 1 ended, so the run stops; k3lab train --resume RUN_DIR continues from
// checkpoints/step_00000040": the newest finished checkpoint in RUN_DIR as this machine sees it.
std::string peer_loss_line(const std::vector<int>& ended_ranks, const std::string& run_dir);

class PeerLossNote {
 public:
  // While alive, a stop signal that finds a rank on this machine ended prints peer_loss_line on
  // stderr from the first live rank here; a stop signal without one is a stop request, left to the
  // trainer.
  explicit PeerLossNote(std::string run_dir);

 private:
  void note() const;  // on the stop signals' watcher thread

  std::string run_dir_;
  StopNote stop_note_;  // last: gone before what it reads
};

}  // namespace k3::train
