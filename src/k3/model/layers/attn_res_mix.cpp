#include "k3/model/layers/attn_res_mix.h"

#include "k3/base/profile.h"
#include "k3/kernels/attn_res.h"

namespace k3::model {

AttnResMix::AttnResMix(ParamRegistry& reg, const std::string& prefix, int64_t dim, float eps,
                       const ShardSpec& shard)
    : prefix_(prefix),
      proj_(reg.add(prefix + "_proj.weight", {1, dim}, ParamInit::zeros(), shard)),
      norm_(reg.add(prefix + "_norm.weight", {dim}, ParamInit::ones(), shard)),
      dim_(dim),
      eps_(eps) {}

void AttnResMix::forward(const Step& s, std::span<const float* const> rows, int64_t N,
                         float* out) const {
  ProfileScope time("attn_res");
  const int64_t n = static_cast<int64_t>(rows.size());
  float* alpha = s.alloc(N * n);
  kernels::attn_res_forward(
      {rows.data(), n, N, dim_, s.params.value(norm_).f32(), s.params.value(proj_).f32(), eps_},
      out, alpha);
  s.save_exact(prefix_ + ".alpha", alpha, N * n);  // mixing weights: small, never lossy
}

void AttnResMix::backward(const Step& s, std::span<const float* const> rows, int64_t N,
                          const float* dout, std::span<float* const> d_rows) const {
  ProfileScope time("attn_res");
  ArenaScope scope(s.arena);
  const int64_t n = static_cast<int64_t>(rows.size());
  kernels::attn_res_backward(
      {rows.data(), n, N, dim_, s.params.value(norm_).f32(), s.params.value(proj_).f32(), eps_},
      s.load(prefix_ + ".alpha"), dout, d_rows.data(), s.params.grad(norm_).f32(),
      s.params.grad(proj_).f32(), s.alloc(N * n));
}

}  // namespace k3::model
