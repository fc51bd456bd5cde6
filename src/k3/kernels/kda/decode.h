// One generated token through a KDA layer's middle part (math §3 "Decode"), fused per head:
// short-conv window update + SiLU for q, k, v, L2 norms, the decay gate, β, the delta-rule state
// update and the gated output norm, in one pass over the head's D channels and D×D state.
// The projections before (q, k, v, f_a/f_b, b, g) and after (o_proj) are matrix products the
// caller runs for all sequences at once.
//
// Per sequence b (B sequences, P = H·D channels):
//   token:  q, k, v, f, gate [B, P] projections of the token; beta_logit [B, H]
//   state:  one DecodeState per sequence: its q/k/v windows [K_c−1, P] (short_conv.h layout) and
//           S [H, D, D] (delta_rule.h), wherever each sequence keeps them
//   out:    y [B, P], the input of o_proj
#pragma once

#include <cstdint>
#include <span>

namespace k3::kernels::kda {

struct DecodeParams {
  int64_t H = 1, D = 1, conv_kernel = 4;
  bool bounded_gate = true;
  float gate_lower_bound = -5.0f;
  float norm_eps = 1e-5f;
  const float *q_conv = nullptr, *k_conv = nullptr, *v_conv = nullptr;  // [P, K_c]
  const float *A_log = nullptr, *dt_bias = nullptr;                     // [H], [P]
  const float* o_norm = nullptr;                                        // [D]
};

struct DecodeToken {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *f = nullptr, *gate = nullptr;
  const float* beta_logit = nullptr;
};

struct DecodeState {
  float *q_window = nullptr, *k_window = nullptr, *v_window = nullptr;
  float* S = nullptr;
};

// Advances the windows and S of every sequence (st[b] for row b) by one token and writes y.
void decode_step(const DecodeParams& p, const DecodeToken& in, std::span<const DecodeState> st,
                 float* y);

}  // namespace k3::kernels::kda
