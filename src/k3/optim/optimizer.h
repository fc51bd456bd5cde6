// A run's optimizer: every parameter updated as its Assignment says (param_groups.h) —
// AdamW, Muon (whole, per head or per expert) or not at all (frozen) — with one learning rate and
// one weight decay λ for both, as math §7 intends (Muon's 0.2·√max(m, n) scale matches AdamW's
// update RMS).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "k3/optim/adamw.h"
#include "k3/optim/muon.h"
#include "k3/optim/param_groups.h"

namespace k3::optim {

struct OptimizerConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;  // AdamW
  float weight_decay = 0.1f;                       // λ, both
  float muon_momentum = 0.95f;
  int ns_steps = 5;
  kernels::Precision ns_precision = kernels::Precision::F32;
};

// The parameters of each optimizer, as a plan assigns them (checked against the ParamSet by
// name and shape), and the summary line below.
struct OptimizerParts {
  ParamSet adamw, muon;
  std::vector<bool> decay;          // per AdamW slot
  std::vector<int64_t> block_rows;  // per Muon slot
  std::string summary;
};
OptimizerParts split_by_optimizer(const ParamSet& params, const std::vector<Assignment>& plan);

AdamWConfig adamw_config(const OptimizerConfig& c);
MuonConfig muon_config(const OptimizerConfig& c);

class Optimizer {
 public:
  // `plan`: one assignment per slot of `params`, matched by name (assign_param_groups' output).
  Optimizer(const ParamSet& params, const std::vector<Assignment>& plan, OptimizerConfig config);

  // One step at learning rate lr over every trained parameter; gradients are multiplied by
  // grad_scale first (clipping). Frozen parameters are left as they are.
  void step(float lr, float grad_scale);
  int64_t steps_taken() const { return adamw_.steps_taken(); }
  void set_steps_taken(int64_t steps) { adamw_.set_steps_taken(steps); }

  // Checkpoint state: AdamW's "exp_avg.<name>", "exp_avg_sq.<name>" and Muon's "momentum.<name>".
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;

  // "adamw 12 tensors (1300 values), muon 24 tensors (5200 values), frozen 0 tensors (0 values)".
  const std::string& summary() const { return summary_; }

 private:
  Optimizer(OptimizerParts parts, OptimizerConfig config);

  AdamW adamw_;
  Muon muon_;
  std::string summary_;
};

}  // namespace k3::optim
