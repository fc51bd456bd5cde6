// The decoder: embedding → N × [RMSNorm → gated attention → RMSNorm → GLU MLP] → RMSNorm →
// untied LM head, with K3's tensor names. The loss comes from the fused LM-head + cross-entropy,
// so the [tokens, vocab] logits never exist during training.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "k3/kernels/cross_entropy.h"
#include "k3/model/config.h"
#include "k3/model/layers/gated_attention.h"
#include "k3/model/layers/mlp.h"
#include "k3/model/layers/norm.h"

namespace k3 {

struct TokenBatch {
  const int32_t* tokens = nullptr;   // [B, T]
  const int32_t* targets = nullptr;  // [B, T]; ignore_index marks positions without a target
  int64_t B = 0, T = 0;
};

// Keys and values of every layer for generation: [max_len, heads * head_dim] per layer.
struct KVCache {
  int64_t max_len = 0, length = 0;
  std::vector<Tensor> k, v;
};

class Model {
 public:
  explicit Model(ModelConfig config);  // registers, allocates, but does not initialize parameters
  void initialize(uint64_t seed) { params_.initialize(seed); }

  const ModelConfig& config() const { return config_; }
  ParamRegistry& params() { return params_; }
  const ParamRegistry& params() const { return params_; }

  // One micro-batch: forward, loss, backward. Parameter gradients accumulate (they are not
  // zeroed); gradients are those of grad_scale * (sum of token losses).
  kernels::LossSum forward_backward(Arena& arena, ActivationManager& acts, const TokenBatch& b,
                                    float grad_scale);
  // Evaluation: the summed loss, nothing saved, no gradients.
  kernels::LossSum forward_loss(Arena& arena, const TokenBatch& b);
  // Full logits [B*T, vocab] (tests and small-scale inspection only).
  void forward_logits(Arena& arena, const int32_t* tokens, int64_t B, int64_t T, float* logits);

  KVCache make_cache(int64_t max_len) const;
  // Feeds n tokens at positions cache.length..; writes the logits of the last one [vocab].
  void decode(Arena& arena, KVCache& cache, const int32_t* tokens, int64_t n, float* logits);

  // Bytes of step arena one micro-batch of B x T tokens needs (activations, scratch, logits chunk).
  size_t step_arena_bytes(int64_t B, int64_t T) const;

  // Training FLOPs per token: 6 × matmul parameters + attention (12 · layers · attn_dim · T / 2).
  double train_flops_per_token(int64_t T) const;
  int64_t matmul_params() const;

 private:
  struct Layer {
    RMSNorm input_norm, post_norm;
    GatedAttention attn;
    GluMlp mlp;
  };
  // Embedding and the layers; returns the final normalized hidden states [B*T, hidden].
  float* forward_hidden(const Step& s, const int32_t* tokens, int64_t B, int64_t T);
  int64_t lm_head_chunk() const;

  ModelConfig config_;
  ParamRegistry params_;
  int embed_ = -1, head_ = -1;
  std::vector<Layer> layers_;
  RMSNorm final_norm_;
};

}  // namespace k3
