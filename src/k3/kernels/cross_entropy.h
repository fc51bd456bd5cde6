// Cross-entropy, and the fused LM head + cross-entropy that never holds the [N, V] logits.
//
// Losses are returned as a SUM over counted tokens together with the count, so the caller decides
// the normalization (mean over a global batch across micro-batches). Gradients are of
// grad_scale * (sum of losses): pass grad_scale = 1 / total_count for a mean.
#pragma once

#include <cstdint>

namespace k3::kernels {

struct LossSum {
  double sum = 0;     // summed -log p(target) over counted tokens
  int64_t count = 0;  // tokens whose target != ignore_index
};

// logits [N, V] are overwritten by their gradient (softmax - onehot) * grad_scale; rows whose
// target is ignore_index get zero gradient. dlogits may alias logits.
LossSum cross_entropy_forward_backward(float* logits, const int32_t* targets, int64_t N, int64_t V,
                                       int32_t ignore_index, float grad_scale);

struct LmHeadCeArgs {
  const float* h = nullptr;          // [N, d] final hidden states
  const float* w = nullptr;          // [V, d] lm_head weight
  const int32_t* targets = nullptr;  // [N]
  int64_t N = 0, d = 0, V = 0;
  int32_t ignore_index = -100;
  float grad_scale = 1.0f;
  int64_t chunk = 1024;        // tokens per chunk: the only extra memory is chunk * V floats
  float* workspace = nullptr;  // [chunk, V]
  float* dh = nullptr;         // [N, d] written, or null
  float* dw = nullptr;         // [V, d] accumulated, or null
};

// Per chunk of tokens: logits = h Wᵀ, loss and dlogits in place, dh = dlogits W, dW += dlogitsᵀ h.
LossSum lm_head_cross_entropy(const LmHeadCeArgs& a);

// Vocabulary-parallel cross-entropy: the logits of a row are split by vocabulary over shards
// (the LM head's rows split over tp), and no shard ever holds a row's whole logits. Each shard
// sums up its part of every row in three numbers, the shards' numbers are exchanged (3 floats per
// row and shard, whatever the vocabulary) and combined into each row's normalizer, and each shard
// turns its own logits into its part of the gradient:
//   1. ce_shard_stats: per row, max m, Σ exp(x − m) over the shard, and the target's logit when
//      the target lies in the shard (else 0);
//   2. ce_combine: every shard's stats, in shard order, give the row's max M and sum S =
//      Σ_shards sum·exp(m − M); the loss is M + log S − x_target;
//   3. ce_shard_grad: logits in place become (exp(x − M) / S − onehot) · grad_scale.
// With one shard this is the arithmetic of cross_entropy_forward_backward.
struct VocabRange {
  int64_t first = 0, size = 0;  // the shard's columns [first, first + size) of the vocabulary
  int64_t vocab = 0;            // the whole vocabulary, which targets must lie in
};
inline constexpr int64_t kCeStats = 3;  // floats per row and shard
// stats [N, 3]. Throws on a target outside the vocabulary (and not ignore_index).
void ce_shard_stats(const float* logits, const int32_t* targets, int64_t N, const VocabRange& r,
                    int32_t ignore_index, float* stats);
// all_stats [shards, N, 3] -> norm [N, 2] = (M, S) per row; returns the loss over counted rows.
LossSum ce_combine(const float* all_stats, int64_t shards, const int32_t* targets, int64_t N,
                   int32_t ignore_index, float* norm);
void ce_shard_grad(float* logits, const int32_t* targets, int64_t N, const VocabRange& r,
                   const float* norm, int32_t ignore_index, float grad_scale);

}  // namespace k3::kernels
