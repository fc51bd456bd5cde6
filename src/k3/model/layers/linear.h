// A bias-free linear layer, y = x Wᵀ with W [out, in] (the checkpoint layout), in one of three
// tensor-parallel modes over the Step's tp group:
//   replicated  every rank holds all of W; no communication.
//   column      W's output features are split over tp (ShardSpec dim 0): each rank computes its
//               slice of y from the whole x; the backward all-reduces dx over tp.
//   row         W's input features are split over tp (ShardSpec dim 1): each rank multiplies its
//               slice of x, and the forward all-reduces y over tp. (A bias, were there one,
//               would be added once, after the all-reduce.)
// A column layer followed by a row layer (q/k/v then o, gate/up then down) needs no
// communication between them. The layer owns exactly the one collective its mode implies; with
// tp of size 1 every mode runs the replicated arithmetic, bit for bit.
#pragma once

#include <cstdint>
#include <string>

#include "k3/model/step.h"

namespace k3::model {

enum class LinearMode { replicated, column, row };

class Linear {
 public:
  Linear() = default;
  // Registers `name`.weight with global shape [out, in], initialized N(0, std²), split over the
  // registry's "tp" group as `mode` says; in() and out() are this rank's (local) sizes.
  Linear(ParamRegistry& reg, const std::string& name, int64_t in, int64_t out, float std,
         LinearMode mode = LinearMode::replicated);

  // x [rows, in()], y [rows, out()] (row mode: y is the full output, summed over tp).
  void forward(const Step& s, const float* x, int64_t rows, float* y) const;
  // dW += dyᵀ x. dx (when not null) is written, or added to when accumulate_dx (column mode: the
  // sum over tp of every rank's part).
  void backward(const Step& s, const float* x, const float* dy, int64_t rows, float* dx,
                bool accumulate_dx) const;

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  int weight() const { return w_; }
  LinearMode mode() const { return mode_; }

 private:
  int w_ = -1;
  int64_t in_ = 0, out_ = 0;
  LinearMode mode_ = LinearMode::replicated;
};

}  // namespace k3::model
