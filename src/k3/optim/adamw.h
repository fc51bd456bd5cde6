// AdamW over every parameter of a ParamSet, with per-parameter weight decay chosen by name.
// State m and v live in flat buffers with the parameters' layout.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "k3/optim/param_set.h"

namespace k3 {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// Matrices decay; embeddings, norms, gates' vectors and other 1-D parameters do not.
bool decays_by_default(const ParamSlot& p);

class AdamW {
 public:
  AdamW(ParamSet params, AdamWConfig config);

  // One step at learning rate lr; gradients are multiplied by grad_scale first (clipping).
  void step(float lr, float grad_scale);
  int64_t steps_taken() const { return step_; }

  // Optimizer state for checkpoints: "exp_avg.<name>", "exp_avg_sq.<name>" views, and the step.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  void set_steps_taken(int64_t step) { step_ = step; }

 private:
  ParamSet params_;
  AdamWConfig config_;
  std::vector<bool> decay_;
  Tensor m_, v_;
  int64_t step_ = 0;
};

}  // namespace k3
