#include "k3/parallel/parallel_step.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"
#include "k3/model/context/zigzag.h"
#include "k3/optim/clip.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/pipeline/model_stages.h"

namespace k3::parallel {

ParallelStep::ParallelStep(model::Model& model, const dist::ProcessGrid& grid,
                           const std::vector<optim::Assignment>& plan,
                           optim::OptimizerConfig config, ParallelStepOptions options)
    : model_(model),
      dp_(grid.dp()),
      tp_(grid.tp()),
      ep_(grid.ep()),
      cp_(grid.cp()),
      pp_(grid.pp()),
      data_(grid.replica()),
      data_rank_(grid.coord().ep + grid.dims().ep * grid.coord().dp),
      data_ranks_(grid.dims().ep * grid.dims().dp),
      norm_runs_(norm_runs(model.params(), tp_.size(), ep_.size())),
      options_(options),
      layout_(model.params(), dp_.size(), dp_.rank(), options.bucket_floats),
      sync_(model.params(), layout_, dp_, tp_, ep_, grid.cp(), options.zero, options.overlap),
      optimizer_(param_set(model.params()), plan, config, layout_, grid, options.zero),
      executor_(grid.pp()) {
  K3_CHECK(pp_.size() == 1 || model.pipeline().vp == 1 ||
               options.schedule == pipeline::ScheduleKind::interleaved,
           "pipeline: vp ", model.pipeline().vp, " runs the interleaved schedule, not ",
           pipeline::schedule_kind_name(options.schedule));
}

std::vector<ParallelStep::NormRun> ParallelStep::norm_runs(const model::ParamRegistry& params,
                                                           int tp, int ep) {
  std::vector<NormRun> runs;
  for (int i = 0; i < params.size(); ++i) {
    const model::ParamInfo& p = params.info(i);
    const int kind = (tp > 1 && p.shard.split() && p.shard.group == "tp" ? 1 : 0) +
                     (ep > 1 && p.shard.expert_owned() ? 2 : 0);
    if (runs.empty() || runs.back().kind != kind) {
      if (!runs.empty()) runs.back().range.end = p.offset;
      runs.push_back({{p.offset, 0}, kind});
    }
  }
  if (!runs.empty()) runs.back().range.end = params.flat_size();
  return runs;
}

int64_t ParallelStep::first_row(int64_t global_rows) const {
  return data_rank_ * rows(global_rows);
}

int64_t ParallelStep::rows(int64_t global_rows) const {
  K3_CHECK(global_rows % data_ranks_ == 0, "a batch of ", global_rows,
           " rows does not split over dp·ep = ", data_ranks_);
  return global_rows / data_ranks_;
}

StepTotals ParallelStep::forward_backward(Arena& arena, activation::ActivationManager& acts,
                                          std::span<const model::TokenBatch> global_shares) {
  // Under context parallelism each rank runs its zig-zag chunks of every sequence.
  std::vector<model::TokenBatch> micro_batches;
  cp_tokens_.resize(global_shares.size());
  for (size_t m = 0; m < global_shares.size(); ++m)
    micro_batches.push_back(
        model::context_share(global_shares[m], cp_.size(), cp_.rank(), cp_tokens_[m]));
  const int32_t ignore = model_.config().ignore_index;
  StepTotals t;
  for (const model::TokenBatch& b : micro_batches)
    for (int64_t i = 0; i < b.B * b.T; ++i) t.tokens += b.targets[i] != ignore;
  data_.all_reduce(&t.tokens, 1);
  model_.params().zero_grads();
  const float grad_scale = t.tokens > 0 ? 1.0f / static_cast<float>(t.tokens) : 0.0f;
  double loss_sum = 0;
  if (pp_.size() > 1) {
    if (regions_)
      for (int r = 0; r < regions_->count(); ++r) (*regions_)[r].reset_peak();
    loss_sum = run_pipeline(acts, micro_batches, grad_scale);
    for (int r = 0; r < regions_->count(); ++r) t.arena_peak += (*regions_)[r].peak();
  } else {
    arena.reset_peak();
    for (size_t i = 0; i < micro_batches.size(); ++i) {
      // The last micro-batch's backward starts the reduction of each bucket as it completes.
      const model::GradsFinal hook = i + 1 == micro_batches.size() ? sync_.begin() : nullptr;
      loss_sum += model_.forward_backward(arena, acts, micro_batches[i], grad_scale, hook).sum;
    }
    if (micro_batches.empty()) sync_.begin();
    t.arena_peak = arena.peak();
  }
  sync_.finish();
  data_.all_reduce(&loss_sum, 1);
  pp_.all_reduce(&loss_sum, 1);
  t.loss = t.tokens > 0 ? loss_sum / static_cast<double>(t.tokens) : NAN;
  t.grad_norm = grad_norm();
  return t;
}

double ParallelStep::run_pipeline(activation::ActivationManager& acts,
                                  std::span<const model::TokenBatch> micro_batches,
                                  float grad_scale) {
  const model::PipelineSplit& split = model_.pipeline();
  const int m = static_cast<int>(micro_batches.size());
  if (schedule_.ranks.empty() || schedule_.shape.microbatches != m) {
    pipeline::ScheduleShape shape;
    shape.kind = options_.schedule;
    shape.pp = split.pp;
    shape.vp = split.vp;
    shape.microbatches = m;
    shape.group = options_.group;
    shape.fillers = model_.has_vision() ? options_.fillers : pipeline::Fillers::none;
    schedule_ = pipeline::make_schedule(shape);
    const int regions = pipeline::simulate(schedule_).peak_in_flight(pp_.rank());
    if (!regions_ || regions_->count() < regions) {
      regions_ = std::make_unique<ArenaRegions>(options_.stage_arena_bytes, regions);
      deferred_.resize(static_cast<size_t>(regions));
    }
  }
  pipeline::ModelStages work(model_, acts, *regions_, deferred_, micro_batches, grad_scale);
  measured_ = executor_.run(schedule_, work);
  // Every gradient is final once the schedule has run: the reduction starts after it.
  const model::GradsFinal hook = sync_.begin();
  for (int i = model_.params().size() - 1; i >= 0; --i) hook(i, i + 1);
  return work.loss_sum();
}

// Every rank holds the whole reduced gradient, except under ZeRO-2, where each holds its pieces
// and the squares are summed over dp; under pipeline parallelism, over pp too. Parameters split
// over tp add their squares over tp, and routed experts under expert parallelism (each held by one
// ep rank) over ep, while replicated ones (the same on every rank of those groups) count once.
double ParallelStep::grad_norm() const {
  const model::ParamRegistry& p = model_.params();
  const bool pieces = options_.zero == 2 && dp_.size() > 1;
  if (!pieces && tp_.size() == 1 && ep_.size() == 1 && pp_.size() == 1)
    return optim::global_grad_norm(p.grads(), p.flat_size());
  const std::vector<FlatRange> held =
      pieces ? layout_.owned() : std::vector<FlatRange>{{0, p.flat_size()}};
  double squares[4] = {0, 0, 0, 0};  // by NormRun::kind
  for (const NormRun& run : norm_runs_)
    for (const FlatRange& h : held) {
      const size_t lo = std::max(h.begin, run.range.begin), hi = std::min(h.end, run.range.end);
      if (lo >= hi) continue;
      const double n = optim::global_grad_norm(p.grads() + lo, hi - lo);
      squares[run.kind] += n * n;
    }
  // [replicated, split over tp, owned over ep, both]: sum the last two over ep, then the second
  // and fourth over tp.
  ep_.all_reduce(&squares[2], 2);
  squares[1] += squares[3];
  tp_.all_reduce(&squares[1], 1);
  double total = squares[0] + squares[1] + squares[2];
  if (pieces) dp_.all_reduce(&total, 1);
  pp_.all_reduce(&total, 1);  // each pp rank holds its own stages' parameters
  return std::sqrt(total);
}

// Every rank that routes its own tokens: dp, and ep (carved out of the data-parallel ranks).
model::CountReducer ParallelStep::count_reducer() const {
  return [this](std::span<int64_t> counts) {
    data_.all_reduce(counts.data(), static_cast<int64_t>(counts.size()));
  };
}

}  // namespace k3::parallel
