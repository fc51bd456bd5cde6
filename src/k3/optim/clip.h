// Step safety: the global gradient norm, clipping, and the guard that skips non-finite steps.
#pragma once

#include <cstddef>
#include <cstdint>

namespace k3::optim {

// sqrt(sum of squares) over a flat gradient buffer, accumulated in double in a fixed order
// (blocks of fixed size, summed in block order): the same on any thread count.
double global_grad_norm(const float* grads, size_t n);

// The factor that brings the norm down to max_norm (1 when already below, or max_norm <= 0).
float clip_factor(double norm, double max_norm);

// Decides whether a step's update may be applied: a step whose loss or gradient norm is not
// finite is skipped (nothing applied), and after max_in_a_row such steps in a row the run is
// training on garbage, so admit() throws instead.
class StepGuard {
 public:
  explicit StepGuard(int max_in_a_row = 5) : max_in_a_row_(max_in_a_row) {}

  // True when the step may be applied; false (counted as skipped) when it is not finite.
  bool admit(double loss, double grad_norm);
  int64_t skipped() const { return skipped_; }
  void set_skipped(int64_t skipped) { skipped_ = skipped; }  // restored from a checkpoint

 private:
  int max_in_a_row_;
  int bad_in_a_row_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace k3::optim
