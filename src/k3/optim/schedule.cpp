#include "k3/optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace k3 {

float CosineSchedule::lr(int64_t step) const {
  if (step < warmup_steps) return peak_lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / decay_steps, 0.0, 1.0);
  const double floor = peak_lr * min_lr_ratio;
  return static_cast<float>(floor + (peak_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace k3
