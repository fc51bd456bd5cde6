#include "k3/train/loop/step_engine.h"

#include "k3/base/format.h"
#include "k3/base/profile.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/train/config/parallel.h"
#include "k3/train/preflight/memory_estimate.h"

namespace k3::train {
namespace {

// K3's parameter groups (math §7): Muon for matrices, AdamW for the rest, one lr and λ.
// train.optimizer = "adamw" puts every trainable tensor under AdamW (the router bias stays with
// Quantile Balancing); "muon" keeps the default grouping. Sharded over dp by parallel.zero.
parallel::ParallelStep make_parallel_step(model::Model& model, const RunConfig& c,
                                          const dist::ProcessGrid& grid) {
  const TrainSection& t = c.train;
  const ParallelSection& p = c.parallel;
  return parallel::ParallelStep(
      model, grid, optimizer_plan(parallel::param_set(model.params()).slots, model.config(), t),
      optim::OptimizerConfig{.beta1 = static_cast<float>(t.beta1),
                             .beta2 = static_cast<float>(t.beta2),
                             .eps = static_cast<float>(t.eps),
                             .weight_decay = static_cast<float>(t.weight_decay),
                             .ns_precision = t.newton_schulz_precision()},
      parallel::ParallelStepOptions{
          .zero = static_cast<int>(p.zero),
          .bucket_floats = static_cast<size_t>(p.bucket_mib * 1024 * 1024 / sizeof(float)),
          .overlap = p.overlap,
          .schedule = pipeline_schedule(p),
          .group = static_cast<int>(p.pp_group),
          .fillers = pipeline_fillers(p)});
}

}  // namespace

StepEngine::StepEngine(Session& session, const dist::ProcessGrid& grid,
                       std::function<void(const std::string&)> say)
    : session_(session),
      grid_(grid),
      say_(std::move(say)),
      parallel_(make_parallel_step(*session.model, session.config, grid)),
      activations_(session.config.activation, session.acts, grid),
      schedule_(session.config.train.lr_schedule()) {}

StepResult StepEngine::step(int64_t step, std::span<const model::TokenBatch> micro_batches) {
  parallel::StepTotals t;
  {
    ProfileScope time(kStepBucket);
    if (activations_.needs_profile()) {  // budget mode: measure once, then plan
      activations_.begin_profile();
      say_(activations_.plan(
          parallel_.forward_backward(session_.arena, session_.acts, micro_batches).arena_peak));
    }
    activations_.begin_step();
    t = parallel_.forward_backward(session_.arena, session_.acts, micro_batches);
    activations_.end_step(t.arena_peak);
  }
  model::Model& model = *session_.model;
  StepResult r;
  r.grad_norm = t.grad_norm;
  if (!guard_.admit(t.loss, t.grad_norm)) {
    say_(strprintf(
        "step %lld: non-finite loss (%g) or gradient norm (%g): step skipped, nothing applied",
        static_cast<long long>(step + 1), t.loss, t.grad_norm));
    model.discard_global_batch();
    if (grid_.ep().size() > 1) model.take_dispatch_stats();  // collective over ep
    return r;
  }
  {
    ProfileScope time(kOptimizerBucket);
    parallel_.apply(schedule_.lr(step),
                    optim::clip_factor(t.grad_norm, session_.config.train.grad_clip));
  }
  // Quantile Balancing once per global batch, from the routing counts of every data-parallel
  // rank's tokens summed: every rank moves its router bias identically.
  r.expert_load = model.end_global_batch(parallel_.count_reducer());
  if (grid_.ep().size() > 1) r.dispatch = model.take_dispatch_stats();
  r.loss = t.loss;
  r.applied = true;
  return r;
}

}  // namespace k3::train
