// Stable LatentMoE (math §5), the feed-forward block of every K3 layer after the first:
//   s = sigmoid(W_r x) in fp32; the k experts with the largest s + b are chosen (b, the router
//   bias, only selects: a balancer sets it, no gradient reaches it);
//   p_e = s_e / (Σ_chosen s + 1e-20) · routed_scaling_factor;
//   z = W_lat_down x;  r = Σ_e p_e W2_e SiTU(W1_e z, W3_e z);  routed = W_lat_up RMSNorm_L(r);
//   shared = the S shared experts fused into one SiTU-GLU of width S·F;  out = routed + shared.
// With moe_latent = false it is the standard top-k MoE of K2: z = x and routed = r (no latent
// projections, no norm; the experts' weights are [F, d] and [d, F]).
// Expert compute is grouped: the (token, slot) pairs are sorted by expert (kernels/moe_permute.h),
// so each expert runs one GEMM per weight over its contiguous rows; under expert parallelism the
// rows travel to the experts' ranks (experts/routed_experts.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "k3/kernels/glu.h"
#include "k3/model/balancing.h"
#include "k3/model/config.h"
#include "k3/model/experts/routed_experts.h"
#include "k3/model/layers/linear.h"
#include "k3/model/layers/mixer.h"
#include "k3/model/layers/mlp.h"
#include "k3/model/layers/norm.h"

namespace k3::model {

// True for a router bias (*.gate.e_score_correction_bias). The balancer owns its value: the
// optimizer must skip it entirely (no update, no weight decay).
bool is_router_bias(const std::string& name);

class LatentMoE final : public FeedForward {
 public:
  // prefix: model.layers.N.block_sparse_moe. Registers, in checkpoint order, gate.weight [E, d],
  // gate.e_score_correction_bias [E], routed_expert_down_proj [L, d], routed_expert_norm [L],
  // routed_expert_up_proj [d, L] (these three only in the latent space), experts.{e}.w1 / w3
  // [F, L] and w2 [L, F] (L = d without the latent space; expert e's three tensors one block of
  // the flat buffer), shared_experts.{gate,up}_proj [S·F, d] and down_proj [d, S·F]. Throws
  // k3::Error naming the first MoE field of c that is out of range.
  LatentMoE(ParamRegistry& reg, const std::string& prefix, const ModelConfig& c);

  // x, out: this rank's rows of [tokens, hidden]. When s.training, saves what backward needs and
  // adds the tokens to the balancer's counts (so a forward must not be replayed for
  // recompute while training). Under tensor parallelism every tp rank routes all tokens alike.
  void forward(const Step& s, const float* x, int64_t tokens, float* out) const override;
  // dx is written; parameter gradients accumulate (the router bias gets none).
  void backward(const Step& s, const float* dout, int64_t tokens, float* dx) const override;

  // Once per global batch, after the optimizer step: the balancer's update of the router bias
  // (reduce sums the counts over data- and context-parallel ranks; none means one rank).
  // Returns the batch's expert-load statistics, also kept as load_stats().
  const ExpertLoadStats& end_global_batch(ParamRegistry& reg, const CountReducer& reduce = nullptr);
  const ExpertLoadStats& load_stats() const { return balancer_->last_stats(); }
  // A skipped step: its routing counts dropped, the bias unchanged.
  void discard_global_batch() { balancer_->discard(); }
  // The routed rows' dispatch since the last call (experts/routed_experts.h); collective over ep.
  DispatchStats take_dispatch_stats(const dist::Comm& ep) const { return routed_.take_stats(ep); }

  // The balancer's state (Quantile Balancing's range {lo, hi}; none for the bias balancer) must
  // be checkpointed with the bias, under this name.
  std::string balancer_state_name() const { return prefix_ + "." + balancer_->state_name(); }
  RouterBalancer& balancer() { return *balancer_; }
  const RouterBalancer& balancer() const { return *balancer_; }
  bool latent_space() const { return latent_space_; }

  int router_bias() const { return bias_; }
  // Matmul parameters one token uses in forward (router, latent projections, k experts, shared);
  // this rank's share of them under tensor parallelism.
  int64_t active_matmul_params() const;
  // Step arena use of one forward + backward over `rows` tokens, in floats (index arrays count two
  // floats per int64): what forward keeps for backward and, on top, the larger of the forward and
  // the backward scratch. bytes() is the most it takes, allocation rounding included.
  struct ArenaUse {
    double kept = 0, scratch = 0;
    size_t bytes() const;
  };
  static ArenaUse arena_use(const ModelConfig& c, int64_t rows);

 private:
  // Router scores, chosen experts, routing weights and cutoffs α for every token.
  void route(const Step& s, const float* x, int64_t rows, float* scores, int32_t* ids,
             float* weights, float* alpha) const;
  void router_backward(const float* scores, const int32_t* ids, const float* dweights, int64_t rows,
                       float* dlogits) const;

  std::string prefix_;
  // width_: this rank's slice of each expert's intermediate dimension (all of it without tp);
  // latent_: the experts' input width, L (hidden_ without the latent space).
  int64_t hidden_ = 0, experts_ = 0, k_ = 0, width_ = 0, latent_ = 0, shared_width_ = 0;
  float scaling_ = 1.f;
  bool latent_space_ = true;
  Linear router_, latent_down_, latent_up_;  // the latent projections: unset without them
  int bias_ = -1;
  RMSNorm latent_norm_;
  RoutedExperts routed_;
  std::optional<GluMlp> shared_;              // absent when num_shared_experts = 0
  std::unique_ptr<RouterBalancer> balancer_;  // forward adds to its counts
};

}  // namespace k3::model
