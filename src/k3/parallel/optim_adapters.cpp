#include "k3/parallel/optim_adapters.h"

namespace k3::parallel {

optim::ParamSet param_set(const model::ParamRegistry& params) {
  optim::ParamSet set;
  for (int i = 0; i < params.size(); ++i)
    set.slots.push_back({params.info(i).name, params.info(i).local_shape, params.info(i).offset});
  set.values = params.values();
  set.grads = params.grads();
  set.flat_size = params.flat_size();
  return set;
}

optim::HeadSizes head_sizes(const model::ModelConfig& c) {
  return {c.kda_head_dim, c.qk_nope_head_dim + c.qk_rope_head_dim,
          c.qk_nope_head_dim + c.v_head_dim, c.v_head_dim, c.head_dim};
}

}  // namespace k3::parallel
