#include "k3/kernels/full_attention.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"
#include "k3/kernels/gemm.h"

namespace k3::kernels {
namespace {

void check(const char* kernel, const AttentionShape& s) {
  K3_CHECK(!s.causal && s.dr == 0, kernel, ": attends both ways without a shared key part");
  K3_CHECK(s.B >= 0 && s.T >= 1 && s.H >= 1 && s.dqk >= 1 && s.dv >= 1, kernel,
           ": bad shape B=", s.B, " T=", s.T, " H=", s.H, " dqk=", s.dqk, " dv=", s.dv);
}

// One head's [T, d] slice of a [B, T, H, d] tensor: rows H·d apart.
GemmArgs head_operand(GemmArgs g, bool a, const float* base, int64_t b, int64_t h,
                      const AttentionShape& s, int64_t d) {
  const float* at = base + (b * s.T * s.H + h) * d;
  (a ? g.A : g.B) = at;
  (a ? g.lda : g.ldb) = s.H * d;
  return g;
}

}  // namespace

void full_attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                            float* out, float* p) {
  check("full_attention_forward", s);
  const int64_t T = s.T;
  const float scale = s.effective_scale();
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      float* ph = p + (b * s.H + h) * T * T;
      // scores = scale · q kᵀ, then each row softmaxed in place
      GemmArgs g{.trans_b = true, .M = T, .N = T, .K = s.dqk, .alpha = scale, .C = ph, .ldc = T};
      gemm(head_operand(head_operand(g, true, q, b, h, s, s.dqk), false, k, b, h, s, s.dqk));
      for (int64_t t = 0; t < T; ++t) {
        float* row = ph + t * T;
        const float mx = *std::max_element(row, row + T);
        float sum = 0;
        for (int64_t u = 0; u < T; ++u) sum += row[u] = std::exp(row[u] - mx);
        for (int64_t u = 0; u < T; ++u) row[u] /= sum;
      }
      // out = p v
      GemmArgs o{.M = T, .N = s.dv, .K = T, .A = ph, .lda = T, .ldc = s.H * s.dv};
      o.C = out + (b * T * s.H + h) * s.dv;
      gemm(head_operand(o, false, v, b, h, s, s.dv));
    }
}

int64_t full_attention_scratch(const AttentionShape& s) { return s.T * s.T; }

void full_attention_backward(const AttentionShape& s, const float* q, const float* k,
                             const float* v, const float* p, const float* dout, float* dq,
                             float* dk, float* dv, float* scratch) {
  check("full_attention_backward", s);
  const int64_t T = s.T;
  const float scale = s.effective_scale();
  float* ds = scratch;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const float* ph = p + (b * s.H + h) * T * T;
      const int64_t at_v = (b * T * s.H + h) * s.dv, at_k = (b * T * s.H + h) * s.dqk;
      // dv = pᵀ dout
      GemmArgs g{.trans_a = true,
                 .M = T,
                 .N = s.dv,
                 .K = T,
                 .A = ph,
                 .lda = T,
                 .C = dv + at_v,
                 .ldc = s.H * s.dv};
      gemm(head_operand(g, false, dout, b, h, s, s.dv));
      // dp = dout vᵀ, then ds = scale · p ∘ (dp − Σ_u p dp) row by row
      GemmArgs d{.trans_b = true, .M = T, .N = T, .K = s.dv, .C = ds, .ldc = T};
      gemm(head_operand(head_operand(d, true, dout, b, h, s, s.dv), false, v, b, h, s, s.dv));
      for (int64_t t = 0; t < T; ++t) {
        const float* pr = ph + t * T;
        float* row = ds + t * T;
        float mean = 0;
        for (int64_t u = 0; u < T; ++u) mean += pr[u] * row[u];
        for (int64_t u = 0; u < T; ++u) row[u] = scale * pr[u] * (row[u] - mean);
      }
      // dq = ds k, dk = dsᵀ q
      GemmArgs gq{
          .M = T, .N = s.dqk, .K = T, .A = ds, .lda = T, .C = dq + at_k, .ldc = s.H * s.dqk};
      gemm(head_operand(gq, false, k, b, h, s, s.dqk));
      GemmArgs gk{.trans_a = true,
                  .M = T,
                  .N = s.dqk,
                  .K = T,
                  .A = ds,
                  .lda = T,
                  .C = dk + at_k,
                  .ldc = s.H * s.dqk};
      gemm(head_operand(gk, false, q, b, h, s, s.dqk));
    }
}

}  // namespace k3::kernels
