#include "k3/parallel/zero/sharded_optimizer.h"

#include <cstring>

#include "k3/base/error.h"

namespace k3::parallel {

ShardedOptimizer::ShardedOptimizer(const optim::ParamSet& params,
                                   const std::vector<optim::Assignment>& plan,
                                   optim::OptimizerConfig config, const ShardLayout& layout,
                                   const dist::Comm& dp, int zero_stage)
    : zero_stage_(zero_stage), layout_(layout), dp_(dp), values_(params.values) {
  K3_CHECK(zero_stage >= 0 && zero_stage <= 2, "ZeRO stage ", zero_stage, ": expected 0, 1 or 2");
  K3_CHECK(layout.ranks() == dp.size() && layout.rank() == dp.rank(), "the shard layout is for rank ",
           layout.rank(), " of ", layout.ranks(), ", the group ", dp.name(), " has rank ",
           dp.rank(), " of ", dp.size());
  size_t covered = 0;
  for (const Bucket& b : layout.buckets()) covered += b.range.size();
  K3_CHECK(covered == params.flat_size, "the shard layout covers ", covered,
           " floats, the parameters take ", params.flat_size);
  if (zero_stage == 0) {
    replicated_ = std::make_unique<optim::Optimizer>(params, plan, config);
    summary_ = replicated_->summary();
    return;
  }
  optim::OptimizerParts parts = optim::split_by_optimizer(params, plan);
  summary_ = std::move(parts.summary);
  adamw_slots_ = parts.adamw.slots;
  muon_slots_ = parts.muon.slots;
  adamw_ = std::make_unique<ShardedAdamW>(std::move(parts.adamw), std::move(parts.decay),
                                          optim::adamw_config(config), layout_);
  muon_ = std::make_unique<DistributedMuon>(std::move(parts.muon), parts.block_rows,
                                            optim::muon_config(config), layout_, dp_, zero_stage);
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::step(float lr, float grad_scale) {
  if (replicated_) {
    replicated_->step(lr, grad_scale);
    return;
  }
  muon_->start();  // gradient pieces travel to the block owners while AdamW runs
  adamw_->step(lr, grad_scale);
  muon_->finish(lr, grad_scale);
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

std::vector<ShardedOptimizer::StateTensor> ShardedOptimizer::sharded_state() const {
  std::vector<StateTensor> out;
  for (size_t i = 0; i < adamw_slots_.size(); ++i) {
    const optim::ParamSlot& p = adamw_slots_[i];
    StateTensor m{"exp_avg." + p.name, p.shape, {}}, v{"exp_avg_sq." + p.name, p.shape, {}};
    for (const ShardedAdamW::Segment& s : adamw_->segments()) {
      if (s.slot != i) continue;
      const auto at = static_cast<int64_t>(s.range.begin - p.offset),
                 n = static_cast<int64_t>(s.range.size());
      m.parts.push_back({at, n, adamw_->exp_avg() + s.state_at});
      v.parts.push_back({at, n, adamw_->exp_avg_sq() + s.state_at});
    }
    out.push_back(std::move(m));
    out.push_back(std::move(v));
  }
  for (size_t i = 0; i < muon_slots_.size(); ++i) {
    const optim::ParamSlot& p = muon_slots_[i];
    StateTensor t{"momentum." + p.name, p.shape, {}};
    const auto& blocks = muon_->blocks();
    for (size_t b = 0; b < blocks.size(); ++b)
      if (blocks[b].slot == i && muon_->momentum(b))
        t.parts.push_back({static_cast<int64_t>(blocks[b].offset - p.offset), blocks[b].numel(),
                           muon_->momentum(b)});
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::pair<std::string, Tensor>> ShardedOptimizer::gather_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (replicated_) {
    for (const auto& [name, view] : replicated_->state_tensors()) {
      Tensor copy = Tensor::empty(view.shape());
      std::memcpy(copy.data(), view.data(), view.nbytes());
      out.emplace_back(name, std::move(copy));
    }
    return out;
  }
  // Each element is held by exactly one rank and zero elsewhere, so a sum gathers it exactly.
  dist::Comm dp = dp_;
  std::vector<dist::Request> sums;
  for (const StateTensor& s : sharded_state()) {
    Tensor t = Tensor::zeros(s.shape);
    for (const StatePart& p : s.parts)
      std::memcpy(t.f32() + p.at, p.state, static_cast<size_t>(p.length) * sizeof(float));
    sums.push_back(dp.all_reduce_async(t.f32(), t.numel()));
    out.emplace_back(s.name, std::move(t));
  }
  dist::wait_all(sums);
  return out;
}

void ShardedOptimizer::restore_state(
    const std::function<const Tensor*(const std::string& name)>& find) {
  const int rank = dp_.size() > 1 ? dp_.rank() : -1;
  auto source = [&](const std::string& name, const Shape& shape) {
    const Tensor* t = find(name);
    K3_CHECK_CTX(t, (ErrorContext{"", name, rank}), "optimizer state tensor missing");
    K3_CHECK_CTX(t->shape() == shape && t->dtype() == DType::F32, (ErrorContext{"", name, rank}),
                 "the state holds ", dtype_name(t->dtype()), " ", shape_str(t->shape()),
                 ", the optimizer expects ", dtype_name(DType::F32), " ", shape_str(shape));
    return t->f32();
  };
  if (replicated_) {
    for (const auto& [name, view] : replicated_->state_tensors())
      std::memcpy(view.data(), source(name, view.shape()), view.nbytes());
    return;
  }
  for (const StateTensor& s : sharded_state()) {
    const float* from = source(s.name, s.shape);
    for (const StatePart& p : s.parts)
      std::memcpy(p.state, from + p.at, static_cast<size_t>(p.length) * sizeof(float));
  }
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  if (replicated_) {
    for (const auto& [name, view] : replicated_->state_tensors())
      bytes += static_cast<int64_t>(view.nbytes());
    return bytes;
  }
  return (2 * adamw_->state_floats() + muon_->state_floats()) *
         static_cast<int64_t>(sizeof(float));
}

MuonTraffic ShardedOptimizer::muon_traffic() const {
  return muon_ ? muon_->traffic() : MuonTraffic{};
}

}  // namespace k3::parallel
