// A bias-free linear layer, y = x Wᵀ with W [out, in] (the checkpoint layout), laid out over the
// Step's tp group in one of four modes:
//   replicated  every rank holds all of W and computes the same y from the same x;
//   summed      every rank holds all of W, but sits inside a tensor-parallel region where its
//               output gradient is a partial sum over tp (it feeds this rank's heads only): its
//               input gradient and its weight gradient are partial sums too; the region sums the
//               first, the optimizer's gradient reduction the second (ShardSpec::summed);
//   column      W's output features are split over tp (dim 0): y is this rank's features;
//   row         W's input features are split over tp (dim 1): y is a partial sum over tp.
// The layer itself never communicates: the region around it does, once at each end
// (layers/tp_region.h), so a column layer followed by a row layer needs nothing in between.
#pragma once

#include <cstdint>
#include <string>

#include "k3/model/step.h"

namespace k3::model {

enum class LinearMode { replicated, summed, column, row };
ShardSpec shard_of(LinearMode mode);  // over "tp"

class Linear {
 public:
  Linear() = default;
  // Registers `name`.weight with global shape [out, in], initialized N(0, std²), laid out over
  // the registry's "tp" group as `mode` says; in() and out() are this rank's (local) sizes.
  // ep_owner >= 0: a routed expert's weight, held only by that rank of the "ep" group (ShardSpec).
  Linear(ParamRegistry& reg, const std::string& name, int64_t in, int64_t out, float std,
         LinearMode mode = LinearMode::replicated, int ep_owner = -1);

  // x [rows, in()], y [rows, out()].
  void forward(const Step& s, const float* x, int64_t rows, float* y) const;
  // dW += dyᵀ x (Step::weight_grad: deferred under zero-bubble schedules). dx (when not null) = dy W, or += when accumulate_dx.
  void backward(const Step& s, const float* x, const float* dy, int64_t rows, float* dx,
                bool accumulate_dx) const;

  // Keeps this layer's products in fp32 when the step's are bf16: the projections whose outputs
  // choose experts (the router) or enter an exponential (KDA's decay and β), docs/precision.md.
  void keep_fp32() { fp32_ = true; }

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  int weight() const { return w_; }
  LinearMode mode() const { return mode_; }

 private:
  int w_ = -1;
  int64_t in_ = 0, out_ = 0;
  LinearMode mode_ = LinearMode::replicated;
  bool fp32_ = false;
  kernels::Precision precision(const Step& s) const {
    return fp32_ ? kernels::Precision::F32 : s.precision;
  }
};

}  // namespace k3::model
