// A bias-free linear layer, y = x Wᵀ with W [out, in] (the checkpoint layout).
#pragma once

#include <cstdint>
#include <string>

#include "k3/model/step.h"

namespace k3::model {

class Linear {
 public:
  Linear() = default;
  // Registers `name`.weight with shape [out, in], initialized N(0, std²).
  Linear(ParamRegistry& reg, const std::string& name, int64_t in, int64_t out, float std);

  void forward(const Step& s, const float* x, int64_t rows, float* y) const;
  // dW += dyᵀ x. dx (when not null) is written, or added to when accumulate_dx.
  void backward(const Step& s, const float* x, const float* dy, int64_t rows, float* dx,
                bool accumulate_dx) const;

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  int weight() const { return w_; }

 private:
  int w_ = -1;
  int64_t in_ = 0, out_ = 0;
};

}  // namespace k3::model
