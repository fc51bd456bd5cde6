// Learning-rate schedules: linear warmup, then cosine decay to a floor.
#pragma once

#include <cstdint>

namespace k3 {

struct CosineSchedule {
  float peak_lr = 1e-3f;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  float min_lr_ratio = 0.1f;  // the floor, as a fraction of the peak

  // Learning rate for 0-based step `step`: warmup reaches the peak at step warmup_steps - 1.
  float lr(int64_t step) const;
};

}  // namespace k3
