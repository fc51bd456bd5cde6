// What observes the training loop: after each step every recorder adds its figures to the step's
// metrics record (RUN_DIR/metrics.jsonl). The loop calls every recorder on every rank, in one
// order, so a recorder whose figures need a collective runs it there; only the lead's record is
// written. A recorder reads its own sources and the step's result, never a key another recorder
// wrote. Their order matters only to the communication counters: a recorder's collective counts
// in the figures of whichever step the communication recorder reads next (train_loop.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "k3/train/loop/step_engine.h"

namespace k3::train {

class Recorder {
 public:
  virtual ~Recorder() = default;
  // STEP: the steps completed (1 after the first); RESULT: what that step did.
  virtual void record(int64_t step, const StepResult& result, nlohmann::json& rec) = 0;
};

}  // namespace k3::train
