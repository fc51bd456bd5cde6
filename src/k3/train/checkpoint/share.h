// Resuming across hosts that share no filesystem (docs/distributed.md, "Across hosts"): the lead
// alone writes checkpoints, on its own disk; at a resume it sends the files of the checkpoint it
// resumes from to the ranks whose host cannot see them, each of which plans from a private copy.
#pragma once

#include <string>

#include "k3/dist/comm.h"

namespace k3::train {

// Where a rank reads the checkpoint the lead resumes from.
class CheckpointView {
 public:
  CheckpointView(std::string run_dir, std::string lead_step_dir, bool copy);
  ~CheckpointView();  // removes a copy (files a load has opened stay readable until closed)
  CheckpointView(const CheckpointView&) = delete;
  CheckpointView& operator=(const CheckpointView&) = delete;

  // The run directory to plan the resume from: the run's own, or the copy's, which holds that
  // one checkpoint alone.
  const std::string& run_dir() const { return run_dir_; }
  const std::string& lead_step_dir() const { return lead_step_dir_; }  // on the lead's disk

 private:
  std::string run_dir_, lead_step_dir_;
  bool copy_;
};

// Collective over WORLD. LEAD_STEP_DIR is the step directory the lead resumes from (world rank
// 0's argument counts; the others' is ignored). A rank that finds the same manifest.json at that
// path reads the lead's files (one filesystem, or a shared one): its view is RUN_DIR. Every other
// rank receives each file of the step directory from the lead into a temporary directory of its
// own (under TMPDIR, or /tmp).
CheckpointView share_checkpoint(const dist::Comm& world, const std::string& run_dir,
                                const std::string& lead_step_dir);

}  // namespace k3::train
