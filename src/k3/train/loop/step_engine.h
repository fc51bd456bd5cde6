// One optimizer step of a run, everything that decides what the step applies: the parallel step
// (forward and backward over the grid, gradients reduced, the sharded optimizer), the activation
// policies around it, the guard that skips a non-finite step, the learning-rate schedule and
// clipping, and the router-bias update of the MoE layers. A skipped step applies nothing: neither
// the optimizer nor the router bias moves, and its routing counts are dropped.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "k3/model/model.h"
#include "k3/optim/clip.h"
#include "k3/optim/schedule.h"
#include "k3/parallel/parallel_step.h"
#include "k3/train/loop/activations.h"
#include "k3/train/loop/trainer.h"
#include "k3/train/session.h"

namespace k3::train {

// What one step did (every rank holds the same figures).
struct StepResult {
  double loss = NAN;  // mean over the global batch's tokens, NaN when the step was skipped
  double grad_norm = NAN;
  bool applied = false;  // false: skipped by the guard
  // The MoE layers' load of this global batch, by 0-based layer (this rank's stages), and under
  // expert parallelism how their rows were dispatched; empty when skipped or without experts.
  std::map<int64_t, model::ExpertLoadStats> expert_load;
  std::map<int64_t, model::DispatchStats> dispatch;
};

class StepEngine {
 public:
  // The session's model on GRID, with the optimizer, activation policy and schedule of its
  // configuration. SAY shows a line to the user (the budget mode's plan, a skipped step).
  StepEngine(Session& session, const dist::ProcessGrid& grid,
             std::function<void(const std::string&)> say);

  // Step STEP (0-based) on this rank's shares of the global batch's micro-batches.
  StepResult step(int64_t step, std::span<const model::TokenBatch> micro_batches);

  // This rank's rows of a global micro-batch.
  int64_t first_row(int64_t global_rows) const { return parallel_.first_row(global_rows); }
  int64_t rows(int64_t global_rows) const { return parallel_.rows(global_rows); }

  double lr(int64_t step) const { return schedule_.lr(step); }
  parallel::ParallelStep& parallel() { return parallel_; }
  const parallel::ParallelStep& parallel() const { return parallel_; }
  ActivationRun& activations() { return activations_; }
  const ActivationRun& activations() const { return activations_; }
  optim::StepGuard& guard() { return guard_; }
  const optim::StepGuard& guard() const { return guard_; }

 private:
  Session& session_;
  const dist::ProcessGrid& grid_;
  std::function<void(const std::string&)> say_;
  parallel::ParallelStep parallel_;  // first: a bad optimizer rule is reported before the rest
  ActivationRun activations_;
  optim::Schedule schedule_;
  optim::StepGuard guard_;
};

}  // namespace k3::train
