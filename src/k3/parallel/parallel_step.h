// One optimizer step over every parallel dimension the grid has: data (ZeRO-1/2), tensor, context,
// expert, and pipeline (the step's schedule and its fillers run by the executor). What the trainer
// runs, in one piece that tests can drive with their own batches (every layout against the
// single-process run).
//
// Each rank takes a contiguous share of the rows of every micro-batch of the global batch;
// together the ranks see exactly the single-process batch. The loss and the gradient are the
// mean over every counted token of the global batch: the token count is summed over dp before
// the backward, each rank scales its sum by 1 / that count, and the gradient reduction (GradSync,
// overlapped with the last micro-batch's backward) adds the shares. The optimizer is sharded as
// parallel.zero says (ShardedOptimizer); gradient clipping uses the global norm.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/dist/grid.h"
#include "k3/model/model.h"
#include "k3/parallel/pipeline/executor.h"
#include "k3/parallel/pipeline/schedule.h"
#include "k3/parallel/zero/grad_sync.h"
#include "k3/parallel/zero/shard_layout.h"
#include "k3/parallel/zero/sharded_optimizer.h"

namespace k3::parallel {

struct ParallelStepOptions {
  int zero = 0;              // 0, 1 or 2
  size_t bucket_floats = 0;  // 0: one bucket
  bool overlap = true;       // reduce buckets during the backward
  // Pipeline parallelism (grid pp > 1): the schedule of the step's micro-batches, and the size of
  // each micro-batch chunk's activation region (reserved, faulted on first use).
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  int group = 0;  // interleaved: micro-batches per group (0: pp)
  // Models with a vision tower: where its forward runs (schedule.h): in the bubbles of rank 0 as
  // filler nodes, all before the pipeline, or (none) inside the first stage's forwards.
  pipeline::Fillers fillers = pipeline::Fillers::in_bubbles;
  size_t stage_arena_bytes = size_t{256} << 20;
};

struct StepTotals {
  double loss = 0;     // mean over the global batch's counted tokens (NaN when none)
  int64_t tokens = 0;  // counted tokens of the global batch
  double grad_norm = 0;
  // The step arena's peak (under pp, the sum of the micro-batch regions' peaks): activations and
  // scratch outside the activation manager's own memory.
  size_t arena_peak = 0;
};

class ParallelStep {
 public:
  // `model` must have been built on `grid`; the optimizer updates it as `plan` says.
  ParallelStep(model::Model& model, const dist::ProcessGrid& grid,
               const std::vector<optim::Assignment>& plan, optim::OptimizerConfig config,
               ParallelStepOptions options);

  // This rank's rows of a global micro-batch of `global_rows` rows (which dp·ep must divide:
  // the ep group is carved out of the data-parallel ranks, and every rank of dp × ep reads its
  // own rows; dense gradients are summed over both, the routed experts' over dp alone).
  int64_t first_row(int64_t global_rows) const;
  int64_t rows(int64_t global_rows) const;

  // Forward and backward of this rank's shares of the step's micro-batches, gradients reduced.
  // Under context parallelism every cp rank is given the same rows and runs its two zig-zag
  // chunks of each sequence (the layers' context-parallel layout, model/context/). Under pipeline
  // parallelism every pp rank is given the same micro-batches and runs its stages' nodes of the
  // schedule (interleaved when the model's split has vp > 1); the loss is summed over pp.
  StepTotals forward_backward(Arena& arena, activation::ActivationManager& acts,
                              std::span<const model::TokenBatch> micro_batches);
  // Applies the step to every parameter (each rank updates its shard; all end equal).
  // Under bf16 products the model's bf16 copy of the weights is refreshed from the new values.
  void apply(float lr, float grad_scale) {
    optimizer_.step(lr, grad_scale);
    model_.weights_changed();
  }

  // The sum of routing counts over dp × ep, for Quantile Balancing.
  model::CountReducer count_reducer() const;

  ShardedOptimizer& optimizer() { return optimizer_; }
  // Under pipeline parallelism: the last step's schedule, and this rank's measured nodes.
  const pipeline::Schedule& schedule() const { return schedule_; }
  const std::vector<pipeline::NodeTime>& measured() const { return measured_; }
  const ShardLayout& layout() const { return layout_; }
  const GradSync& sync() const { return sync_; }

 private:
  double grad_norm() const;
  // The micro-batches through this rank's pipeline stages; returns the loss summed over them.
  double run_pipeline(activation::ActivationManager& acts,
                      std::span<const model::TokenBatch> micro_batches, float grad_scale);

  // The flat buffer cut into runs of consecutive parameters alike for the norm: kind = 1 if split
  // over tp, + 2 if a routed expert owned by one ep rank.
  struct NormRun {
    FlatRange range;
    int kind;
  };
  static std::vector<NormRun> norm_runs(const model::ParamRegistry& params, int tp, int ep);

  model::Model& model_;
  const dist::Comm& dp_;
  const dist::Comm& tp_;
  const dist::Comm& ep_;
  const dist::Comm& cp_;
  const dist::Comm& pp_;
  const dist::Comm& data_;  // the ranks with their own tokens: cp × ep × dp (the replica group)
  int data_rank_, data_ranks_;  // this rank's place in ep × dp, its size
  std::vector<NormRun> norm_runs_;
  std::vector<std::vector<int32_t>> cp_tokens_;  // per micro-batch: this cp rank's tokens, targets
  ParallelStepOptions options_;
  ShardLayout layout_;
  GradSync sync_;
  ShardedOptimizer optimizer_;
  pipeline::Executor executor_;
  pipeline::Schedule schedule_;
  std::unique_ptr<ArenaRegions> regions_;
  std::vector<model::DeferredWeightGrads> deferred_;  // one per region (zero-bubble schedules)
  std::vector<pipeline::NodeTime> measured_;
};

}  // namespace k3::parallel
