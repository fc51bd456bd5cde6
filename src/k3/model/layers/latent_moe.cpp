#include "k3/model/layers/latent_moe.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "k3/base/arena.h"
#include "k3/base/error.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/moe_permute.h"
#include "k3/model/layers/tp_region.h"
#include "k3/model/quantile_balancing.h"

namespace k3::model {
namespace {

constexpr int64_t kParallelMin = 1 << 15;
constexpr float kWeightEps = 1e-20f;  // math §5: p_e = s_e / (Σ s + 1e-20)

}  // namespace

bool is_router_bias(const std::string& name) {
  return name.ends_with(".gate.e_score_correction_bias");
}

LatentMoE::LatentMoE(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c)
    : prefix_(prefix),
      hidden_(c.hidden_size),
      experts_(c.num_experts),
      k_(c.num_experts_per_token),
      width_(c.moe_intermediate_size),
      latent_(c.expert_dim()),
      shared_width_(c.num_shared_experts * c.moe_intermediate_size),
      scaling_(static_cast<float>(c.routed_scaling_factor)),
      latent_space_(c.moe_latent) {
  for (auto [field, value] : {std::pair{"hidden_size", c.hidden_size},
                              {"num_experts", c.num_experts},
                              {"num_experts_per_token", c.num_experts_per_token},
                              {"moe_intermediate_size", c.moe_intermediate_size},
                              {"routed_expert_hidden_size", c.expert_dim()}})
    K3_CHECK_CTX(value > 0, (ErrorContext{c.source, field, -1}),
                 "LatentMoE needs a positive value, got ", value);
  K3_CHECK_CTX(c.num_shared_experts >= 0, (ErrorContext{c.source, "num_shared_experts", -1}),
               "expected a non-negative value, got ", c.num_shared_experts);
  K3_CHECK_CTX(k_ < experts_, (ErrorContext{c.source, "num_experts_per_token", -1}),
               "must be below num_experts (", experts_, ") for the balancer's cutoff, got ", k_);
  const float std = static_cast<float>(c.initializer_range);
  const float out_std = c.output_init_std();

  // Under tensor parallelism each expert's intermediate dimension is split over tp: w1 and w3
  // column-parallel, w2 row-parallel (experts/routed_experts.h), and so are the shared experts'.
  // The router and the latent down-projection are replicated and feed only this rank's slices
  // (summed); the latent norm and up-projection are replicated and see whole values.
  router_ = Linear(reg, prefix + ".gate", hidden_, experts_, std, LinearMode::summed);
  router_.keep_fp32();
  bias_ = reg.add(prefix + ".gate.e_score_correction_bias", {experts_}, ParamInit::zeros());
  if (latent_space_) {
    latent_down_ =
        Linear(reg, prefix + ".routed_expert_down_proj", hidden_, latent_, std, LinearMode::summed);
    latent_norm_ =
        RMSNorm(reg, prefix + ".routed_expert_norm", latent_, static_cast<float>(c.rms_norm_eps));
    latent_up_ = Linear(reg, prefix + ".routed_expert_up_proj", latent_, hidden_, out_std);
  }
  routed_ = RoutedExperts(reg, prefix, c);
  width_ = routed_.width();  // this rank's
  if (shared_width_ > 0) shared_.emplace(reg, prefix + ".shared_experts", c, shared_width_);
  balancer_ = make_balancer(c);
}

void LatentMoE::route(const Step& s, const float* x, int64_t rows, float* scores, int32_t* ids,
                      float* weights, float* alpha) const {
  const int64_t E = experts_, k = k_;
  router_.forward(s, x, rows, scores);
  const float* bias = s.params.value(bias_).f32();
#pragma omp parallel if (rows * E > kParallelMin)
  {
    std::vector<int32_t> top(static_cast<size_t>(k + 1));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      float* st = scores + t * E;
      for (int64_t e = 0; e < E; ++e) st[e] = 1.f / (1.f + std::exp(-st[e]));
      alpha[t] = select_top_k(st, bias, E, k, top.data());
      float sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += st[top[j]];
      for (int64_t j = 0; j < k; ++j) {
        ids[t * k + j] = top[j];
        weights[t * k + j] = st[top[j]] / (sum + kWeightEps) * scaling_;
      }
    }
  }
}

void LatentMoE::forward(const Step& s, const float* x, int64_t tokens, float* out) const {
  const TpRegion region(s, tokens, hidden_);
  const int64_t rows = tokens, E = experts_, L = latent_, pairs = rows * k_;
  // What backward reads, allocated before the scratch scopes below.
  float *scores = s.alloc(rows * E), *ids_saved = s.alloc(pairs), *weights = s.alloc(pairs);
  float *z = s.alloc(rows * L), *y = s.alloc(pairs * L);
  // The latent norm's input and output; without the latent space r is scratch.
  float *r = nullptr, *r_norm = nullptr, *r_rstd = nullptr;
  if (latent_space_) r = s.alloc(rows * L), r_norm = s.alloc(rows * L), r_rstd = s.alloc(rows);
  const std::optional<GluMlp::Acts> shared_acts =
      shared_ ? std::optional(shared_->alloc_acts(s, rows)) : std::nullopt;
  {
    ArenaScope scratch(s.arena);  // the gathered input, the shared experts' partial output
    const float* xa = region.enter(x);
    float* partial = region.partial(out);
    if (shared_)
      shared_->forward_part(s, xa, rows, *shared_acts, partial);
    else
      std::fill(partial, partial + rows * hidden_, 0.f);
    region.leave(partial, out);
    int32_t* ids = s.arena.allocate_array<int32_t>(static_cast<size_t>(pairs));
    float* alpha = s.alloc(rows);
    route(s, xa, rows, scores, ids, weights, alpha);
    if (s.records_statistics()) balancer_->observe(scores, alpha, ids, rows);
    // Ids are saved as (exact) floats: every saved activation is a float tensor.
    for (int64_t p = 0; p < pairs; ++p) ids_saved[p] = static_cast<float>(ids[p]);
    if (latent_space_)
      latent_down_.forward(s, xa, rows, z);
    else
      std::copy_n(xa, rows * L, z);  // kept: under sequence parallelism xa is scratch
  }
  // Outside any scope: under expert parallelism what it keeps for backward has a size only the
  // step's routing decides.
  routed_.forward(s, ids_saved, rows, z, y);
  {
    ArenaScope scratch(s.arena);
    const kernels::MoePermutePlan plan = plan_rows(s.arena, ids_saved, rows, k_, E);
    if (!latent_space_) r = s.alloc(rows * L);
    kernels::moe_unpermute(plan, y, weights, L, r);
    s.grid.tp().all_reduce(r, rows * L);  // each rank's slice of every expert's output, summed
    float* routed = r;
    if (latent_space_) {
      latent_norm_.forward(s, r, rows, r_norm, r_rstd);
      routed = s.alloc(rows * hidden_);
      latent_up_.forward(s, r_norm, rows, routed);
    }
    kernels::add_inplace(out, region.local(routed), region.rows() * hidden_);
  }
  s.save(prefix_ + ".x", x, region.rows() * hidden_);
  s.save(prefix_ + ".scores", scores, rows * E);
  s.save_exact(prefix_ + ".ids", ids_saved, pairs);
  s.save(prefix_ + ".weights", weights, pairs);
  s.save(prefix_ + ".z", z, rows * L);
  s.save(prefix_ + ".expert_out", y, pairs * L);
  if (latent_space_) s.save(prefix_ + ".r_norm", r_norm, rows * L);
}

// p_j = c s_j / D with D = Σ_chosen s + ε, so dL/ds_j = c (dp_j − Σ_i dp_i s_i / D) / D for the
// chosen j (0 otherwise), and dlogit = dL/ds · s (1 − s).
void LatentMoE::router_backward(const float* scores, const int32_t* ids, const float* dweights,
                                int64_t rows, float* dlogits) const {
  const int64_t E = experts_, k = k_;
#pragma omp parallel for schedule(static) if (rows * E > kParallelMin)
  for (int64_t t = 0; t < rows; ++t) {
    const float* st = scores + t * E;
    float* dl = dlogits + t * E;
    std::fill(dl, dl + E, 0.f);
    float sum = 0, dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float sj = st[ids[t * k + j]];
      sum += sj;
      dot += dweights[t * k + j] * sj;
    }
    const float denom = sum + kWeightEps;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      const float ds = scaling_ * (dweights[t * k + j] - dot / denom) / denom;
      dl[e] = ds * st[e] * (1.f - st[e]);
    }
  }
}

// Under tensor parallelism the expert outputs saved are this rank's partial sums, so the routing
// weights' gradient is partial too (and the router's, through it); every input gradient is
// partial, summed at the region's end.
void LatentMoE::backward(const Step& s, const float* dout, int64_t tokens, float* dx) const {
  ArenaScope scope(s.arena);
  const TpRegion region(s, tokens, hidden_);
  const int64_t rows = tokens, E = experts_, L = latent_, pairs = rows * k_;
  const float *scores = s.load(prefix_ + ".scores"), *weights = s.load(prefix_ + ".weights");
  const float* y = s.load(prefix_ + ".expert_out");
  const float* r_norm = latent_space_ ? s.load(prefix_ + ".r_norm") : nullptr;
  const float* ids_saved = s.load(prefix_ + ".ids");
  const float* dy_all = region.leave_backward(dout);
  const float* xa = region.enter(s.load(prefix_ + ".x"));
  float* partial = region.partial(dx);

  if (shared_)
    shared_->backward_part(s, xa, dy_all, rows, partial, false);
  else
    std::fill(partial, partial + rows * hidden_, 0.f);

  const float* dr = dy_all;  // without the latent space r is the routed output itself
  if (latent_space_) {
    float *dr_norm = s.alloc(rows * L), *dr_latent = s.alloc(rows * L);
    latent_up_.backward(s, r_norm, dy_all, rows, dr_norm, false);
    latent_norm_.backward(s, dr_norm, rows, dr_latent, false);
    dr = dr_latent;
  }

  const kernels::MoePermutePlan plan = plan_rows(s.arena, ids_saved, rows, k_, E);
  float *dy = s.alloc(pairs * L), *dweights = s.alloc(pairs);
  kernels::moe_unpermute_backward(plan, y, weights, dr, L, dy, dweights);
  float* dz = s.alloc(rows * L);
  routed_.backward(s, plan, dy, dz);
  if (latent_space_)
    latent_down_.backward(s, xa, dz, rows, partial, true);
  else
    kernels::add_inplace(partial, dz, rows * L);

  int32_t* ids = s.arena.allocate_array<int32_t>(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) ids[p] = static_cast<int32_t>(ids_saved[p]);
  float* dlogits = s.alloc(rows * E);
  router_backward(scores, ids, dweights, rows, dlogits);
  router_.backward(s, xa, dlogits, rows, partial, true);
  region.enter_backward(partial, dx);
}

const ExpertLoadStats& LatentMoE::end_global_batch(ParamRegistry& reg, const CountReducer& reduce) {
  return balancer_->update(reg.value(bias_).f32(), reduce);
}

int64_t LatentMoE::active_matmul_params() const {
  return experts_ * hidden_ + (latent_space_ ? 2 * latent_ * hidden_ : 0) +
         k_ * 3 * width_ * latent_ + (shared_ ? 3 * shared_->width() * hidden_ : 0);
}

LatentMoE::ArenaUse LatentMoE::arena_use(const ModelConfig& c, int64_t rows) {
  const double E = static_cast<double>(c.num_experts), L = static_cast<double>(c.expert_dim()),
               F = static_cast<double>(c.moe_intermediate_size),
               d = static_cast<double>(c.hidden_size),
               S = static_cast<double>(c.num_shared_experts) * F, n = static_cast<double>(rows),
               P = n * static_cast<double>(c.num_experts_per_token);
  // What forward keeps (its own, the latent norm's, the shared experts'), then the larger of the
  // forward and backward scratch. Without the latent space r is scratch and has no norm.
  const double latent = c.moe_latent ? 1 : 0;
  const double kept =
      n * E + 2 * P + (1 + 2 * latent) * n * L + 2 * P * F + P * L + latent * n + 3 * n * S;
  const double plan = 2 * (E + 1 + 2 * P);
  const double fwd = std::max(P + n + plan + P * L + P * F, n * d + (1 - latent) * plan);
  const double bwd =
      3 * n * S + 2 * latent * n * L + plan + 3 * P * L + P + 4 * P * F + n * L + n * E;
  return {kept, std::max(fwd, bwd)};
}

size_t LatentMoE::ArenaUse::bytes() const {
  const size_t allocations = 48;  // each rounds up to 64 bytes
  return static_cast<size_t>(kept + scratch) * sizeof(float) + allocations * Arena::kAlign;
}

}  // namespace k3::model
