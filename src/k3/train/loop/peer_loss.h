// When one rank of a job dies (SIGKILL, a crash, an abort) or a host drops out (its link cut, the
// machine down), the launcher stops the others: SIGTERM, then SIGKILL a second later (Open MPI's
// default, after a SIGCONT; a lost host is noticed when its daemon stops answering,
// docs/distributed.md). A
// survivor is then most likely blocked for good in a collective, so the graceful stop that
// SIGTERM asks for never comes, and without a word the user would not know what was lost nor
// where the run can go on from. PeerLossNote says it, once, as soon as the SIGTERM arrives.
#pragma once

#include <string>

#include "k3/base/stop_signals.h"

namespace k3::train {

// "k3lab: WHAT, so the run stops; k3lab train --resume RUN_DIR continues from
// checkpoints/step_00000040": the newest finished checkpoint in RUN_DIR as this machine sees it.
// WHAT: "rank 1 ended", "rank 3 (host h2) ended", "host h2 (ranks 2, 3) cannot be reached".
std::string peer_loss_line(const std::string& what, const std::string& run_dir);

class PeerLossNote {
 public:
  // While alive, a stop signal that finds a rank ended (on this machine: its process gone; on
  // another: its port refusing) or a host unreachable prints peer_loss_line on stderr, once for
  // the job: from the first live rank on world rank 0's host. A stop signal that finds every rank
  // running is a stop request, left to the trainer.
  explicit PeerLossNote(std::string run_dir);

 private:
  void note() const;  // on the stop signals' watcher thread

  std::string run_dir_;
  StopNote stop_note_;  // last: gone before what it reads
};

}  // namespace k3::train
