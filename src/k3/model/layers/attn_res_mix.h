// One Attention Residuals mixing point (math §2): a learned pseudo-query proj [1, d] (zero at
// init: a uniform mix) and a score norm weight [d], mixing a token's bank rows and its partial sum.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "k3/model/step.h"

namespace k3::model {

class AttnResMix {
 public:
  AttnResMix() = default;
  // Registers `prefix`_proj.weight [1, d] and `prefix`_norm.weight [d], e.g. prefix
  // "model.layers.3.mlp_res", both laid out as `shard` says (summed over tp when each rank mixes
  // only its own tokens).
  AttnResMix(ParamRegistry& reg, const std::string& prefix, int64_t dim, float eps,
             const ShardSpec& shard = {});

  // rows: n pointers to [N, d]; out [N, d]. Saves the mixing weights under `prefix`.
  void forward(const Step& s, std::span<const float* const> rows, int64_t N, float* out) const;
  // Accumulates into d_rows (n pointers to [N, d]) and the weights' gradients.
  void backward(const Step& s, std::span<const float* const> rows, int64_t N, const float* dout,
                std::span<float* const> d_rows) const;

 private:
  std::string prefix_;
  int proj_ = -1, norm_ = -1;
  int64_t dim_ = 0;
  float eps_ = 1e-5f;
};

}  // namespace k3::model
