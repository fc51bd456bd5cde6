// One training step of a model as `k3lab train` takes it, for the benches that time it beside
// PyTorch: zeroed gradients, forward + backward over a fixed random batch (each row's targets the
// next tokens), the optimizer ("adamw": AdamW for every parameter; "muon": K3's groups, Muon and
// Per-Head Muon on the matrices), and under bf16 the refresh of the weights' bf16 copy.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "k3/base/arena.h"
#include "k3/base/profile.h"
#include "k3/base/timer.h"
#include "k3/model/model.h"
#include "k3/optim/optimizer.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/train/config/run_config.h"
#include "k3/train/preflight/memory_estimate.h"
#include "k3/train/session.h"

namespace k3::bench {

// Which optimizer updates each of M's parameters, as `k3lab train` with train.optimizer =
// OPTIMIZER.
inline std::vector<optim::Assignment> optimizer_plan(const model::Model& m,
                                                     const std::string& optimizer) {
  train::TrainSection t;
  t.optimizer = optimizer;
  return train::optimizer_plan(parallel::param_set(m.params()).slots, m.config(), t);
}

class TrainStep {
 public:
  // ns: Muon's Newton-Schulz products' precision (train.ns_precision).
  TrainStep(const model::ModelConfig& c, int64_t B, int64_t T, const std::string& optimizer,
            kernels::Precision ns = kernels::Precision::F32)
      : model_(c),
        opt_(parallel::param_set(model_.params()), optimizer_plan(model_, optimizer),
             {.ns_precision = ns}) {
    model_.initialize(1);
    std::mt19937 rng(2);
    std::uniform_int_distribution<int32_t> draw(0, static_cast<int32_t>(c.vocab_size - 1));
    std::vector<int32_t> row(static_cast<size_t>(T + 1));
    for (int64_t b = 0; b < B; ++b) {
      for (int32_t& t : row) t = draw(rng);
      tokens_.insert(tokens_.end(), row.begin(), row.end() - 1);
      targets_.insert(targets_.end(), row.begin() + 1, row.end());
    }
    batch_ = {tokens_.data(), targets_.data(), B, T};
  }

  // One step at precision p, its seconds. (Switching precision refreshes the bf16 copy too, outside
  // the timer.)
  double step(kernels::Precision p) {
    if (model_.precision() != p) model_.set_precision(p);
    Timer timer;
    model_.params().zero_grads();
    model_.forward_backward(arena_, acts_, batch_, 1.0f / static_cast<float>(batch_.B * batch_.T));
    {
      ProfileScope time("optimizer");
      opt_.step(1e-3f, 1.0f);
    }
    model_.weights_changed();
    return timer.seconds();
  }
  const model::Model& model() const { return model_; }
  int64_t tokens() const { return batch_.B * batch_.T; }
  // Newton-Schulz's multiply-adds x 2 in one step, counted as written (X·Xᵀ, A·A and the
  // update, each whole), over every Muon block in its wide orientation.
  double muon_flops(const std::string& optimizer, int ns_steps = 5) const {
    const optim::OptimizerParts parts = optim::split_by_optimizer(
        parallel::param_set(model_.params()), optimizer_plan(model_, optimizer));
    double flops = 0;
    for (const optim::MuonBlock& b : optim::muon_blocks(parts.muon, parts.block_rows)) {
      const double m = double(std::min(b.rows, b.cols)), n = double(std::max(b.rows, b.cols));
      flops += ns_steps * (4 * m * m * n + 2 * m * m * m);
    }
    return flops;
  }

 private:
  model::Model model_;
  optim::Optimizer opt_;
  std::vector<int32_t> tokens_, targets_;
  model::TokenBatch batch_;
  Arena arena_ = train::step_arena();  // the warm-up steps fault in what a step uses
  activation::ActivationManager acts_;
};

}  // namespace k3::bench
