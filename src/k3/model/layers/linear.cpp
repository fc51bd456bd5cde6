#include "k3/model/layers/linear.h"

#include "k3/base/strings.h"
#include "k3/kernels/gemm.h"

namespace k3::model {

ShardSpec shard_of(LinearMode mode) {
  switch (mode) {
    case LinearMode::summed:
      return ShardSpec::summed("tp");
    case LinearMode::column:
      return {0, "tp"};
    case LinearMode::row:
      return {1, "tp"};
    case LinearMode::replicated:
      break;
  }
  return {};
}

Linear::Linear(ParamRegistry& reg, const std::string& name, int64_t in, int64_t out, float std,
               LinearMode mode, int ep_owner)
    : mode_(mode) {
  ShardSpec shard = shard_of(mode);
  shard.ep_owner = ep_owner;
  w_ = reg.add(str_cat(name, ".weight"), {out, in}, ParamInit::normal(std), shard);
  in_ = reg.info(w_).local_shape[1];
  out_ = reg.info(w_).local_shape[0];
}

void Linear::forward(const Step& s, const float* x, int64_t rows, float* y) const {
  const kernels::Precision p = precision(s);
  kernels::gemm({false, true, rows, out_, in_, 1.f, x, in_, s.params.value(w_).f32(), in_, 0.f, y,
                 out_, p, nullptr, p == s.precision ? s.weight_bf16(w_) : nullptr});
}

void Linear::backward(const Step& s, const float* x, const float* dy, int64_t rows, float* dx,
                      bool accumulate_dx) const {
  const kernels::Precision p = precision(s);
  weight_grad(s.deferred_weight_grads, dy, x, rows, out_, in_, s.params.grad(w_).f32(), p);
  if (!dx) return;
  kernels::gemm({false, false, rows, in_, out_, 1.f, dy, out_, s.params.value(w_).f32(), in_,
                 accumulate_dx ? 1.f : 0.f, dx, in_, p, nullptr,
                 p == s.precision ? s.weight_bf16(w_) : nullptr});
}

}  // namespace k3::model
