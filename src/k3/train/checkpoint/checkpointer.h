// When a run saves, and what: a checkpoint every checkpoint.every steps and at the end of the run
// (or of a curriculum phase), the newest checkpoint.keep_last kept, each with a manifest of where
// training stands (resume.h reads it back: TrainingState).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "k3/parallel/zero/sharded_optimizer.h"
#include "k3/train/checkpoint/resume.h"
#include "k3/train/config/run_config.h"
#include "k3/train/session.h"

namespace k3::train {

class Checkpointer {
 public:
  // WRITER: the rank that writes (the lead); every rank takes part in each save's gathers.
  Checkpointer(const CheckpointSection& config, std::string run_dir, bool writer);

  // Whether step STEP (steps completed) saves: every `every` steps, and at END_STEP.
  bool due(int64_t step, int64_t end_step) const;
  // Saves the session's model and OPTIMIZER at STATE.step, with STATE (and LAYOUT) in the
  // manifest; returns the step directory. Collective over the job.
  std::string save(const Session& session, parallel::ShardedOptimizer& optimizer,
                   const TrainingState& state, const nlohmann::json& layout);
  // A resumed run starts from DIR, saved at STEP.
  void resumed_from(int64_t step, std::string dir);

  int64_t last_step() const { return last_step_; }   // -1: none saved or resumed from
  const std::string& last() const { return last_; }  // empty: none

 private:
  CheckpointSection config_;
  std::string run_dir_;
  bool writer_;
  int64_t last_step_ = -1;
  std::string last_;
};

}  // namespace k3::train
