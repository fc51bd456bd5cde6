// The weight-gradient half of a backward, put off until later (the zero-bubble pipeline
// schedules, parallel/pipeline/schedule.h): while a Step carries a DeferredWeightGrads, Linear's
// backward computes its input gradient at once and queues dW += dyᵀ x here, with copies of dy and
// x (the backward rewinds its scratch before the queued product runs). run() computes the
// products in the order they were queued: each gradient adds the same terms in the same order as
// an unsplit backward, so the results are bit-identical. The routed experts' products and the
// small elementwise gradients (norms, gates) stay in the backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "k3/kernels/gemm.h"

namespace k3::model {

class DeferredWeightGrads {
 public:
  // dy [rows, out], x [rows, in], dw [out, in]: copies dy and x, keeps dw's address.
  void defer(const float* dy, const float* x, int64_t rows, int64_t out, int64_t in, float* dw,
             kernels::Precision precision);
  // Every queued product, in order; then empty (the copies' memory is kept for reuse).
  void run();
  bool empty() const { return products_.empty(); }
  int64_t held_floats() const { return static_cast<int64_t>(operands_.size()); }

 private:
  struct Product {
    size_t dy, x;  // offsets into operands_
    int64_t rows, out, in;
    float* dw;
    kernels::Precision precision;
  };
  std::vector<float> operands_;
  std::vector<Product> products_;
};

// dW += dyᵀ x: now, or queued in `deferred` when it is set.
void weight_grad(DeferredWeightGrads* deferred, const float* dy, const float* x, int64_t rows,
                 int64_t out, int64_t in, float* dw,
                 kernels::Precision precision = kernels::Precision::F32);

}  // namespace k3::model
