#include "k3/parallel/zero/sharded_optimizer.h"

#include <algorithm>
#include <cstring>

#include "k3/base/error.h"

namespace k3::parallel {
namespace {

// A split slot must be this tp rank's equal share of its global tensor along split_dim.
void check_split(const optim::ParamSlot& p, const dist::Comm& tp) {
  if (p.split_dim < 0) return;
  const Shape& g = p.global_shape;
  const auto d = static_cast<size_t>(p.split_dim);
  bool ok = g.size() == p.shape.size() && d < g.size() && p.split_start == tp.rank() * p.shape[d];
  for (size_t k = 0; ok && k < g.size(); ++k)
    ok = g[k] == (k == d ? p.shape[k] * tp.size() : p.shape[k]);
  K3_CHECK_CTX(ok, (ErrorContext{"", p.name, -1}), "a shard ", shape_str(p.shape), " from ",
               p.split_start, " along dimension ", p.split_dim, " of ", shape_str(g),
               " is not tp rank ", tp.rank(), " of ", tp.size(), "'s equal share");
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(const optim::ParamSet& params,
                                   const std::vector<optim::Assignment>& plan,
                                   optim::OptimizerConfig config, const ShardLayout& layout,
                                   const dist::ProcessGrid& grid, int zero_stage)
    : zero_stage_(zero_stage),
      tp_rank_(grid.tp().rank()),
      layout_(layout),
      dp_(grid.dp()),
      values_(params.values) {
  K3_CHECK(zero_stage >= 0 && zero_stage <= 2, "ZeRO stage ", zero_stage, ": expected 0, 1 or 2");
  K3_CHECK(layout.ranks() == dp_.size() && layout.rank() == dp_.rank(),
           "the shard layout is for rank ", layout.rank(), " of ", layout.ranks(), ", the group ",
           dp_.name(), " has rank ", dp_.rank(), " of ", dp_.size());
  size_t covered = 0;
  for (const Bucket& b : layout.buckets()) covered += b.range.size();
  K3_CHECK(covered == params.flat_size, "the shard layout covers ", covered,
           " floats, the parameters take ", params.flat_size);
  for (const optim::ParamSlot& p : params.slots) check_split(p, grid.tp());
  const int tp = grid.tp().size();
  if (tp == 1 && zero_stage == 0) {
    replicated_ = std::make_unique<optim::Optimizer>(params, plan, config);
    summary_ = replicated_->summary();
    state_ = held_state(false);
    return;
  }
  optim::OptimizerParts parts = optim::split_by_optimizer(params, plan);
  summary_ = std::move(parts.summary);
  adamw_slots_ = parts.adamw.slots;
  muon_slots_ = parts.muon.slots;
  // Under ZeRO 0 each rank holds its whole buffer: a layout of one rank, Muon over tp alone.
  const ShardLayout held = zero_stage == 0 ? layout.alone() : layout;
  state_group_ = tp == 1 ? grid.dp() : zero_stage == 0 ? grid.tp() : grid.tp_dp();
  adamw_ = std::make_unique<ShardedAdamW>(std::move(parts.adamw), std::move(parts.decay),
                                          optim::adamw_config(config), held);
  muon_ = std::make_unique<DistributedMuon>(std::move(parts.muon), parts.block_rows,
                                            optim::muon_config(config), held, state_group_, tp,
                                            zero_stage);
  state_ = held_state(false);
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step(float lr, float grad_scale) {
  if (replicated_) {
    replicated_->step(lr, grad_scale);
    return;
  }
  muon_->start();  // gradient pieces travel to the unit owners while AdamW runs
  adamw_->step(lr, grad_scale);
  muon_->finish(lr, grad_scale);
  if (zero_stage_ == 0) return;
  std::vector<dist::Request> gathers;
  for (const Bucket& b : layout_.buckets())
    gathers.push_back(dp_.all_gather_async(values_ + b.range.begin, b.counts));
  dist::wait_all(gathers);
}

int64_t ShardedOptimizer::steps_taken() const {
  return replicated_ ? replicated_->steps_taken() : adamw_->steps_taken();
}

void ShardedOptimizer::set_steps_taken(int64_t steps) {
  if (replicated_)
    replicated_->set_steps_taken(steps);
  else
    adamw_->set_steps_taken(steps);
}

std::vector<ShardedOptimizer::StateTensor> ShardedOptimizer::held_state(bool replicas) const {
  std::vector<StateTensor> out;
  if (replicated_) {
    for (const auto& [name, view] : replicated_->state_tensors())
      out.push_back({name, view.shape(), {{0, view.numel(), view.f32()}}});
    return out;
  }
  // A slot replicated over tp: tp coordinate 0's copy counts, unless every copy is asked for.
  auto counted = [&](const optim::ParamSlot& p) {
    return replicas || p.split_dim >= 0 || tp_rank_ == 0;
  };
  for (const optim::ParamSlot& p : adamw_slots_) {
    out.push_back({"exp_avg." + p.name, p.global(), {}});
    out.push_back({"exp_avg_sq." + p.name, p.global(), {}});
  }
  for (const ShardedAdamW::Segment& s : adamw_->segments()) {
    const optim::ParamSlot& p = adamw_slots_[s.slot];
    if (!counted(p)) continue;
    const auto first = static_cast<int64_t>(s.range.begin - p.offset);
    p.for_each_global_run(
        first, first + static_cast<int64_t>(s.range.size()),
        [&](int64_t global, int64_t local, int64_t n) {
          const int64_t at = s.state_at + local - first;
          out[2 * s.slot].parts.push_back({global, n, adamw_->exp_avg() + at});
          out[2 * s.slot + 1].parts.push_back({global, n, adamw_->exp_avg_sq() + at});
        });
  }
  const size_t muon_first = out.size();
  for (const optim::ParamSlot& p : muon_slots_)
    out.push_back({"momentum." + p.name, p.global(), {}});
  const std::vector<MuonUnit>& units = muon_->units();
  for (size_t u = 0; u < units.size(); ++u)
    if (muon_->momentum(u) && counted(muon_slots_[units[u].slot]))
      out[muon_first + units[u].slot].parts.push_back(
          {units[u].row0 * units[u].cols, units[u].numel(), muon_->momentum(u)});
  return out;
}

// Each element is held by exactly one rank of the group and zero elsewhere, so a sum gathers it
// exactly.
dist::Request ShardedOptimizer::start_gather(size_t i, float* out) const {
  const StateTensor& s = state_.at(i);
  const int64_t n = shape_numel(s.shape);
  std::fill(out, out + n, 0.0f);
  for (const StatePart& p : s.parts)
    std::memcpy(out + p.at, p.state, static_cast<size_t>(p.length) * sizeof(float));
  return state_group_.all_reduce_async(out, n);
}

void ShardedOptimizer::gather_state_into(size_t i, float* out) const {
  start_gather(i, out).wait();
}

std::vector<std::pair<std::string, Tensor>> ShardedOptimizer::gather_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<dist::Request> sums(state_.size());
  for (size_t i = 0; i < state_.size(); ++i) {
    out.emplace_back(state_[i].name, Tensor::empty(state_[i].shape));
    sums[i] = start_gather(i, out.back().second.f32());
  }
  dist::wait_all(sums);
  return out;
}

void ShardedOptimizer::restore_state(
    const std::function<const Tensor*(const std::string& name)>& find) {
  const int rank = state_group_.size() > 1 ? state_group_.rank() : -1;
  for (const StateTensor& s : held_state(true)) {
    const Tensor* t = find(s.name);
    K3_CHECK_CTX(t, (ErrorContext{"", s.name, rank}), "optimizer state tensor missing");
    K3_CHECK_CTX(t->shape() == s.shape && t->dtype() == DType::F32,
                 (ErrorContext{"", s.name, rank}), "the state holds ", dtype_name(t->dtype()), " ",
                 shape_str(t->shape()), ", the optimizer expects ", dtype_name(DType::F32), " ",
                 shape_str(s.shape));
    for (const StatePart& p : s.parts)
      std::memcpy(p.state, t->f32() + p.at, static_cast<size_t>(p.length) * sizeof(float));
  }
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  if (replicated_) {
    for (const auto& [name, view] : replicated_->state_tensors())
      bytes += static_cast<int64_t>(view.nbytes());
    return bytes;
  }
  return (2 * adamw_->state_floats() + muon_->state_floats()) * static_cast<int64_t>(sizeof(float));
}

MuonTraffic ShardedOptimizer::muon_traffic() const {
  return muon_ ? muon_->traffic() : MuonTraffic{};
}

}  // namespace k3::parallel
