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
  const float* h = nullptr;      // [N, d] final hidden states
  const float* w = nullptr;      // [V, d] lm_head weight
  const int32_t* targets = nullptr;  // [N]
  int64_t N = 0, d = 0, V = 0;
  int32_t ignore_index = -100;
  float grad_scale = 1.0f;
  int64_t chunk = 1024;          // tokens per chunk: the only extra memory is chunk * V floats
  float* workspace = nullptr;    // [chunk, V]
  float* dh = nullptr;           // [N, d] written, or null
  float* dw = nullptr;           // [V, d] accumulated, or null
};

// Per chunk of tokens: logits = h Wᵀ, loss and dlogits in place, dh = dlogits W, dW += dlogitsᵀ h.
LossSum lm_head_cross_entropy(const LmHeadCeArgs& a);

}  // namespace k3::kernels
