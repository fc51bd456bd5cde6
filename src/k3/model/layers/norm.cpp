#include "k3/model/layers/norm.h"

#include "k3/base/arena.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/rmsnorm.h"

namespace k3::model {

RMSNorm::RMSNorm(ParamRegistry& reg, const std::string& name, int64_t dim, float eps,
                 ShardSpec shard)
    : name_(name),
      w_(reg.add(name + ".weight", {dim}, ParamInit::ones(), std::move(shard))),
      dim_(dim),
      eps_(eps) {}

void RMSNorm::forward(const Step& s, const float* x, int64_t rows, float* y, float* rstd) const {
  if (!rstd) rstd = s.alloc(rows);
  kernels::rmsnorm_forward(x, s.params.value(w_).f32(), y, rstd, rows, dim_, eps_);
  s.save(name_ + ".x", x, rows * dim_);
  s.save_exact(name_ + ".rstd", rstd, rows);  // a per-row statistic: never stored lossily
}

void RMSNorm::backward(const Step& s, const float* dy, int64_t rows, float* dx,
                       bool accumulate_dx) const {
  ArenaScope scope(s.arena);
  float* out = accumulate_dx ? s.alloc(rows * dim_) : dx;
  kernels::rmsnorm_backward(s.load(name_ + ".x"), s.params.value(w_).f32(), s.load(name_ + ".rstd"),
                            dy, out, s.params.grad(w_).f32(), rows, dim_);
  if (accumulate_dx) kernels::add_inplace(dx, out, rows * dim_);
}

}  // namespace k3::model
