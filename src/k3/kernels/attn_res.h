// Attention Residuals aggregation (math §2): each token mixes its rows
// Z = [bank_0, ..., bank_{n-2}, P] with softmax weights from RMS-normalized scores against one
// learned d-vector w = norm_weight ⊙ proj_weight:
//   ρ_i = 1/sqrt(mean_c Z_i[c]² + eps),  ℓ_i = ρ_i ⟨Z_i, w⟩,  α = softmax(ℓ),  out = Σ_i α_i Z_i
// in fp32 (the raw rows are mixed, not the normalized ones).
#pragma once

#include <cstdint>

namespace k3::kernels {

struct AttnResArgs {
  const float* const* rows = nullptr;  // n pointers, each to an [N, d] array
  int64_t n = 0, N = 0, d = 0;
  const float* norm_weight = nullptr;  // [d]
  const float* proj_weight = nullptr;  // [d]
  float eps = 1e-5f;
};

// out [N, d]; alpha [N, n] (the mixing weights, saved for backward).
void attn_res_forward(const AttnResArgs& a, float* out, float* alpha);

// Accumulates into d_rows[i] ([N, d] each), d_norm_weight and d_proj_weight ([d]).
// scratch: N * n floats.
void attn_res_backward(const AttnResArgs& a, const float* alpha, const float* dout, float* const* d_rows,
                       float* d_norm_weight, float* d_proj_weight, float* scratch);

}  // namespace k3::kernels
