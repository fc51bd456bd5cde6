// Softmax attention in which every query sees every key of its sequence (no causal mask), for
// the short sequences of the vision tower (one image's patches): the scores of each (sequence,
// head) are materialized as a T×T matrix by GEMMs and their probabilities saved for the backward.
// Layouts as in attention.h (q, k [B, T, H, dqk], v and out [B, T, H, dv]), without the shared
// key part (dr = 0); p [B, H, T, T], the probabilities, written by the forward.
#pragma once

#include <cstdint>

#include "k3/kernels/attention.h"

namespace k3::kernels {

void full_attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                            float* out, float* p);

// Writes dq, dk, dv (not accumulated). `scratch` holds full_attention_scratch(s) floats (the
// gradient of one head's scores).
void full_attention_backward(const AttentionShape& s, const float* q, const float* k,
                             const float* v, const float* p, const float* dout, float* dq,
                             float* dk, float* dv, float* scratch);
int64_t full_attention_scratch(const AttentionShape& s);

}  // namespace k3::kernels
