// Set-ups of a model shared by the model tests.
#pragma once

#include <cmath>
#include <string>

#include "k3/base/philox.h"
#include "k3/model/model.h"

namespace k3::testing {

// The Attention Residuals' pseudo-queries start at zero: a uniform mix, whose score norms get no
// gradient. Moves them off it, so the mixing weights differ from token to token.
inline void perturb_attn_res(model::Model& m) {
  model::ParamRegistry& p = m.params();
  for (int i = 0; i < p.size(); ++i)
    if (p.info(i).name.find("res_proj") != std::string::npos)
      fill_normal(p.value(i).f32(), p.value(i).numel(), 3, stream_of(p.info(i).name), 0, 0.f, 0.5f);
}

// The MoE routers start from N(0, 0.02²): a token's expert scores then lie within ~1e-3 of each
// other, and a difference at the rounding level of fp32 (another order of summation, as under
// tensor parallelism) can flip a top-k choice; from there two runs part as any two runs would.
// Drawing the routers wider, N(0, 1/hidden), keeps every choice far from a tie, so runs that differ
// only in rounding stay together and what they compare is the arithmetic. Replicated tensors only.
inline void spread_routers(model::Model& m) {
  model::ParamRegistry& p = m.params();
  const float std = 1.0f / std::sqrt(static_cast<float>(m.config().hidden_size));
  for (int i = 0; i < p.size(); ++i)
    if (p.info(i).name.ends_with(".block_sparse_moe.gate.weight"))
      fill_normal(p.value(i).f32(), p.value(i).numel(), 9, stream_of(p.info(i).name), 0, 0.f, std);
}

}  // namespace k3::testing
