// RMSNorm with a learned weight (K3: fp32 normalize, then multiply by the weight).
#pragma once

#include <cstdint>
#include <string>

#include "k3/model/step.h"

namespace k3::model {

class RMSNorm {
 public:
  RMSNorm() = default;
  // `shard`: ShardSpec::summed("tp") when each tp rank normalizes only its own rows (sequence
  // parallelism) or feeds only its own heads, so that its weight gradient is a partial sum.
  RMSNorm(ParamRegistry& reg, const std::string& name, int64_t dim, float eps,
          ShardSpec shard = {});

  // Saves x and rstd under name_ when training; rstd [rows] is allocated here unless given.
  void forward(const Step& s, const float* x, int64_t rows, float* y, float* rstd = nullptr) const;
  // dx written (or added to when accumulate_dx); dweight accumulated.
  void backward(const Step& s, const float* dy, int64_t rows, float* dx, bool accumulate_dx) const;

 private:
  std::string name_;
  int w_ = -1;
  int64_t dim_ = 0;
  float eps_ = 1e-5f;
};

}  // namespace k3::model
