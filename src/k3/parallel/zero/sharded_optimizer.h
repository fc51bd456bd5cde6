// The run's optimizer (optim::Optimizer: AdamW and Muon by an Assignment plan) under data
// parallelism with ZeRO, over a group `dp` that the ShardLayout cuts the flat buffers for.
//   zero 0: every rank runs the whole optim::Optimizer on the whole (all-reduced) gradient.
//   zero 1: the gradient arrives all-reduced (whole on every rank); optimizer state exists only
//           for what this rank owns; after the update the parameters are all-gathered per
//           bucket, so every rank holds all the new values.
//   zero 2: only this rank's pieces of the gradient buffer hold the reduced gradient (the rest
//           is stale and may be overwritten); otherwise as zero 1.
// Under zero 1 and 2 AdamW keeps m and v for the owned pieces (sharded_adamw.h) and Muon keeps
// each block's momentum at the block's owner (distributed_muon.h). The result equals the
// one-process optimizer's: AdamW bit for bit, Muon too as long as Newton–Schulz gives a block
// the same result in any batch (it does at a fixed thread count; tests/parallel check it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "k3/dist/comm.h"
#include "k3/optim/optimizer.h"
#include "k3/parallel/zero/distributed_muon.h"
#include "k3/parallel/zero/shard_layout.h"
#include "k3/parallel/zero/sharded_adamw.h"

namespace k3::parallel {

class ShardedOptimizer {
 public:
  ShardedOptimizer(const optim::ParamSet& params, const std::vector<optim::Assignment>& plan,
                   optim::OptimizerConfig config, const ShardLayout& layout, const dist::Comm& dp,
                   int zero_stage);
  ~ShardedOptimizer();

  // One step at learning rate lr, gradients multiplied by grad_scale first. Collective over dp.
  void step(float lr, float grad_scale);
  int64_t steps_taken() const;
  void set_steps_taken(int64_t steps);
  int zero_stage() const { return zero_stage_; }
  const std::string& summary() const { return summary_; }

  // The state as optim::Optimizer::state_tensors names and shapes it ("exp_avg.<name>",
  // "exp_avg_sq.<name>", "momentum.<name>", in that order), in global coordinates, so a
  // checkpoint does not depend on the layout. Collective: every rank receives every tensor
  // (owned tensors, allocated for the call).
  std::vector<std::pair<std::string, Tensor>> gather_state() const;
  // Takes this rank's part of each state tensor from find(name) (global tensors, as
  // gather_state gives them). Throws k3::Error naming a tensor that is missing or misshapen.
  void restore_state(const std::function<const Tensor*(const std::string& name)>& find);

  // This rank's optimizer-state bytes: AdamW m and v, Muon momentum.
  int64_t state_bytes() const;
  // Distributed Muon in the last step: bytes sent plus received, working buffers and what the
  // all-gather approach would hold (zero 1 and 2; all zero under zero 0).
  MuonTraffic muon_traffic() const;
  // Its blocks, their owners and the analytic p2p count; null under zero 0.
  const DistributedMuon* distributed_muon() const { return muon_.get(); }

 private:
  // Where this rank's share of a global state tensor lives: elements [at, at + length) of the
  // tensor are `length` floats at `state`.
  struct StatePart {
    int64_t at, length;
    float* state;
  };
  struct StateTensor {
    std::string name;
    Shape shape;
    std::vector<StatePart> parts;
  };
  std::vector<StateTensor> sharded_state() const;

  int zero_stage_;
  ShardLayout layout_;
  dist::Comm dp_;
  float* values_;
  std::string summary_;
  std::unique_ptr<optim::Optimizer> replicated_;  // zero 0
  std::unique_ptr<ShardedAdamW> adamw_;           // zero 1, 2
  std::unique_ptr<DistributedMuon> muon_;         // zero 1, 2
  std::vector<optim::ParamSlot> adamw_slots_, muon_slots_;
};

}  // namespace k3::parallel
