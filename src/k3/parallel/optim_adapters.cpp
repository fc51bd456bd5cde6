#include "k3/parallel/optim_adapters.h"

#include "k3/base/error.h"

namespace k3::parallel {

optim::ParamSet param_set(const model::ParamRegistry& params) {
  optim::ParamSet set;
  for (int i = 0; i < params.size(); ++i) {
    const model::ParamInfo& p = params.info(i);
    if (!p.held()) continue;  // a routed expert another ep rank owns
    // A split over a group of one is no split; the optimizer puts shards together over tp only.
    const bool split = p.shard.dim >= 0 && params.place(p.shard.group).size > 1;
    K3_CHECK_CTX(!split || p.shard.group == "tp", (ErrorContext{"", p.name, -1}),
                 "split over group ", p.shard.group, ": the optimizer handles splits over tp only");
    set.slots.push_back({p.name, p.local_shape, p.offset, p.shape, split ? p.shard.dim : -1,
                         split ? p.shard_start : 0});
  }
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
