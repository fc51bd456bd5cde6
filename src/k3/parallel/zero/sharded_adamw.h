// AdamW under ZeRO 1 and 2: state and update for only the elements this rank owns. AdamW is
// elementwise, so each owned range of a parameter steps exactly as it would inside the whole
// parameter (same kernel, same decay flag, same step count).
#pragma once

#include <cstdint>
#include <vector>

#include "k3/optim/adamw.h"
#include "k3/parallel/zero/shard_layout.h"

namespace k3::parallel {

class ShardedAdamW {
 public:
  // An owned range of one parameter and where its state lives in m and v.
  struct Segment {
    size_t slot = 0;
    FlatRange range;
    int64_t state_at = 0;
  };

  // decay[i] for params.slots[i], as optim::AdamW takes it.
  ShardedAdamW(optim::ParamSet params, std::vector<bool> decay, optim::AdamWConfig config,
               const ShardLayout& layout);

  void step(float lr, float grad_scale);
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }

  const std::vector<Segment>& segments() const { return segments_; }
  float* exp_avg() const { return m_.f32(); }
  float* exp_avg_sq() const { return v_.f32(); }
  int64_t state_floats() const { return m_.numel(); }  // per moment

 private:
  optim::ParamSet params_;
  std::vector<bool> decay_;
  optim::AdamWConfig config_;
  std::vector<Segment> segments_;
  Tensor m_, v_;
  int64_t step_ = 0;
};

}  // namespace k3::parallel
