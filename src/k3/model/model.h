// The decoder, with K3's tensor names: embedding → N layers → final RMSNorm → untied LM head.
// Layer l is [RMSNorm → sequence mixer (gated attention, gated MLA or KDA) → RMSNorm →
// feed-forward (dense GLU MLP or Stable LatentMoE)], joined either by ordinary residual
// connections or, when attn_res_block_size > 0, by Attention Residuals (math §2). The loss comes
// from the fused LM-head + cross-entropy, so the [tokens, vocab] logits never exist in training.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "k3/kernels/cross_entropy.h"
#include "k3/model/config.h"
#include "k3/model/layer_factory.h"
#include "k3/model/layers/attn_res_mix.h"
#include "k3/model/layers/latent_moe.h"
#include "k3/model/layers/norm.h"

namespace k3::model {

struct TokenBatch {
  const int32_t* tokens = nullptr;   // [B, T]
  const int32_t* targets = nullptr;  // [B, T]; ignore_index marks positions without a target
  int64_t B = 0, T = 0;
};

// Called during the backward with a range [first, end) of parameter indices (registry order)
// whose gradients are final for this micro-batch: nothing later in the backward adds to them.
// Data parallelism starts reducing a bucket as soon as all of its parameters are final.
using GradsFinal = std::function<void(int first, int end)>;

// Every layer's decoding state for one sequence.
struct ModelCache {
  int64_t max_len = 0, length = 0;
  std::vector<std::unique_ptr<DecodeCache>> layers;
};

class Model {
 public:
  // Registers every parameter and, when `allocate`, maps their flat buffers (not initialized).
  // Without allocation the model only describes itself (inventory of the full-size config).
  // `grid` must outlive the model; its groups reach every layer through Step.
  explicit Model(ModelConfig config, bool allocate = true,
                 const dist::ProcessGrid& grid = dist::single_process());
  void initialize(uint64_t seed) { params_.initialize(seed); }

  const ModelConfig& config() const { return config_; }
  ParamRegistry& params() { return params_; }
  const ParamRegistry& params() const { return params_; }
  MixerKind layer_mixer(int64_t layer) const { return mixer_kind(config_, layer); }

  // One micro-batch: forward, loss, backward. Parameter gradients accumulate (they are not
  // zeroed); gradients are those of grad_scale * (sum of token losses). `grads_final`, when set,
  // hears of each range of parameters as soon as the backward is done with it.
  kernels::LossSum forward_backward(Arena& arena, activation::ActivationManager& acts,
                                    const TokenBatch& b, float grad_scale,
                                    const GradsFinal& grads_final = {});
  // Evaluation: the summed loss, nothing saved, no gradients.
  kernels::LossSum forward_loss(Arena& arena, const TokenBatch& b);
  // Full logits [B*T, vocab] (tests and small-scale inspection only).
  void forward_logits(Arena& arena, const int32_t* tokens, int64_t B, int64_t T, float* logits);

  ModelCache make_cache(int64_t max_len) const;
  // Feeds n tokens at positions cache.length..; writes the logits of the last one [vocab].
  void decode(Arena& arena, ModelCache& cache, const int32_t* tokens, int64_t n, float* logits);

  // Quantile Balancing, once per global batch after the optimizer step: every MoE layer updates
  // its router bias from the histograms of the training forwards; returns the load statistics by
  // 0-based layer. `reduce` sums the counts across data-parallel ranks (none for one process).
  std::map<int64_t, ExpertLoadStats> end_global_batch(const CountReducer& reduce = nullptr);
  // The balancers' ranges, for checkpoints: one [2] tensor per MoE layer.
  std::vector<std::pair<std::string, Tensor>> balancer_state() const;
  void restore_balancer_state(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& origin);

  // Training FLOPs per token: 6 × matmul parameters + attention (12 · layers · attn_dim · T / 2).
  double train_flops_per_token(int64_t T) const;
  int64_t matmul_params() const;
  // Rows of logits the fused LM head + cross-entropy computes at a time.
  static int64_t lm_head_chunk(int64_t vocab_size);

 private:
  struct Layer {
    int64_t index;
    bool starts_block;
    int params_first = 0, params_end = 0;  // the layer's parameters, in registry order  // Attention Residuals: the layer opens a new block
    RMSNorm input_norm, post_norm;
    std::unique_ptr<Mixer> mixer;
    std::unique_ptr<FeedForward> ffn;
    AttnResMix self_res, mlp_res;  // only with Attention Residuals
  };
  // x holds B·T tokens. Without a cache the mixers run their (training or evaluation) forward;
  // with one they decode B·T = n new tokens of one sequence, updating the cache.
  float* run_stack(const Step& s, float* x, int64_t B, int64_t T, ModelCache* cache);
  void backward_stack(const Step& s, const int32_t* tokens, float* dh, int64_t B, int64_t T,
                      const GradsFinal& grads_final);
  float* embed(const Step& s, const int32_t* tokens, int64_t n);
  bool attn_res() const { return config_.attn_res_block_size > 0; }
  std::string key(const Layer& L, const char* what) const;
  const char* ffn_bucket(int64_t layer) const;  // profile bucket of layer's feed-forward

  ModelConfig config_;
  const dist::ProcessGrid& grid_;
  ParamRegistry params_;
  int embed_ = -1, head_ = -1;
  int tail_first_ = 0;  // the first parameter after the layers (output mixing, final norm, head)
  std::vector<Layer> layers_;
  std::vector<std::pair<int64_t, LatentMoE*>> moe_layers_;  // (layer, the layer's MoE) for balancing
  AttnResMix output_res_;
  RMSNorm final_norm_;
};

}  // namespace k3::model
