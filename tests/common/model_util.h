// Set-ups of a model shared by the model tests.
#pragma once

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

}  // namespace k3::testing
