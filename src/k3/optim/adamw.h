// AdamW (math §7) over the parameters of a ParamSet, decoupled weight decay chosen per
// parameter. State m and v are packed per parameter, one after another.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "k3/optim/param_set.h"

namespace k3::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// Matrices decay, except the token embedding; vectors do not: norms, biases, per-head scalars
// and [1, d] AttnRes pseudo-queries (a tensor counts as a matrix with two dimensions above 1).
bool decays_by_default(const ParamSlot& p);

class AdamW {
 public:
  // decay[i] says whether params.slots[i] decays; empty: decays_by_default for each.
  AdamW(ParamSet params, AdamWConfig config, std::vector<bool> decay = {});

  // One step at learning rate lr; gradients are multiplied by grad_scale first (clipping).
  void step(float lr, float grad_scale);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }

  // Optimizer state for checkpoints: "exp_avg.<name>" and "exp_avg_sq.<name>" views.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;

 private:
  ParamSet params_;
  AdamWConfig config_;
  std::vector<bool> decay_;
  PackedState m_, v_;
  int64_t step_ = 0;
};

}  // namespace k3::optim
