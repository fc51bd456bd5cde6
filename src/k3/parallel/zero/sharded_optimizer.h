// The run's optimizer (optim::Optimizer: AdamW and Muon by an Assignment plan) on a process
// grid: each rank holds its tensor-parallel shards (optim::ParamSlot's split) and, under ZeRO,
// optimizer state for its pieces of them (a ShardLayout cutting the flat buffers over dp).
//   zero 0: the gradient arrives all-reduced over dp; every dp rank updates its whole buffer.
//   zero 1: likewise, but optimizer state exists only for what this rank owns; after the
//           update the parameters are all-gathered over dp per bucket.
//   zero 2: only this rank's pieces of the gradient buffer hold the reduced gradient (the rest
//           is stale and may be overwritten); otherwise as zero 1.
// AdamW is elementwise: it keeps m and v for what the rank updates (sharded_adamw.h). Muon keeps
// each global block's momentum at the block's owner (distributed_muon.h), over dp at tp = 1,
// over tp_dp under ZeRO 1 and 2, over tp under ZeRO 0 (every dp replica alike). At tp = 1 and
// ZeRO 0 this is optim::Optimizer itself. The result equals the one-process optimizer's on the
// global tensors: AdamW bit for bit, Muon too as long as Newton–Schulz gives a block the same
// result in any batch (it does at a fixed thread count; tests/parallel check it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "k3/dist/grid.h"
#include "k3/optim/optimizer.h"
#include "k3/parallel/zero/distributed_muon.h"
#include "k3/parallel/zero/shard_layout.h"
#include "k3/parallel/zero/sharded_adamw.h"

namespace k3::parallel {

class ShardedOptimizer {
 public:
  // This rank's share of a global state tensor: elements [at, at + length) of the tensor (flat
  // indices) are `length` floats at `state`.
  struct StatePart {
    int64_t at, length;
    float* state;
  };
  struct StateTensor {
    std::string name;
    Shape shape;  // global
    std::vector<StatePart> parts;
  };

  // `layout` cuts `params` over grid.dp(); the shards' splits must be grid.tp()'s.
  ShardedOptimizer(const optim::ParamSet& params, const std::vector<optim::Assignment>& plan,
                   optim::OptimizerConfig config, const ShardLayout& layout,
                   const dist::ProcessGrid& grid, int zero_stage);
  ~ShardedOptimizer();

  // One step at learning rate lr, gradients multiplied by grad_scale first. Collective over the
  // grid's dp and the Muon group.
  void step(float lr, float grad_scale);
  int64_t steps_taken() const;
  void set_steps_taken(int64_t steps);
  int zero_stage() const { return zero_stage_; }
  const std::string& summary() const { return summary_; }

  // The state as optim::Optimizer::state_tensors names and orders it ("exp_avg.<name>",
  // "exp_avg_sq.<name>", "momentum.<name>"), in global shapes, and this rank's parts of each:
  // over state_group() every element is held by exactly one rank (of a tensor replicated over
  // tp, tp coordinate 0's copy counts), so a checkpoint does not depend on the layout.
  const std::vector<StateTensor>& state_parts() const { return state_; }
  const dist::Comm& state_group() const { return state_group_; }
  // State tensor i, whole on every rank of state_group() (collective there), written to `out`
  // (its global size), so a checkpoint can stream the tensors one at a time through one buffer.
  void gather_state_into(size_t i, float* out) const;
  // Every state tensor so.
  std::vector<std::pair<std::string, Tensor>> gather_state() const;
  // Fills every copy of the state this rank holds from find(name) (global tensors, as
  // gather_state gives them). Throws k3::Error naming a tensor that is missing or misshapen.
  void restore_state(const std::function<const Tensor*(const std::string& name)>& find);

  // This rank's optimizer-state bytes: AdamW m and v, Muon momentum.
  int64_t state_bytes() const;
  // Distributed Muon in the last step: bytes sent plus received, working buffers and what the
  // all-gather approach would hold (all zero at tp = 1 under ZeRO 0).
  MuonTraffic muon_traffic() const;
  // Its units, their owners and the analytic p2p count; null at tp = 1 under ZeRO 0.
  const DistributedMuon* distributed_muon() const { return muon_.get(); }

 private:
  // The parts this rank holds; `replicas`: also its copies of tensors replicated over tp.
  std::vector<StateTensor> held_state(bool replicas) const;
  dist::Request start_gather(size_t i, float* out) const;

  int zero_stage_, tp_rank_;
  ShardLayout layout_;
  dist::Comm dp_, state_group_;
  float* values_;
  std::string summary_;
  std::unique_ptr<optim::Optimizer> replicated_;  // tp = 1, zero 0
  std::unique_ptr<ShardedAdamW> adamw_;           // otherwise
  std::unique_ptr<DistributedMuon> muon_;
  std::vector<optim::ParamSlot> adamw_slots_, muon_slots_;
  std::vector<StateTensor> state_;
};

}  // namespace k3::parallel
