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

// The GEMMs of one (sequence b, head h): a head's [T, d] slice of a [B, T, H, d] tensor has its
// rows H·d apart; the scores and probabilities are plain [T, T] matrices.
struct Head {
  const AttentionShape& s;
  int64_t b, h;
  int64_t at(int64_t d) const { return (b * s.T * s.H + h) * d; }
  // out [T, T] = alpha · x yᵀ, x and y heads of width d.
  void scores(float alpha, const float* x, const float* y, int64_t d, float* out) const {
    gemm({.trans_b = true,
          .M = s.T,
          .N = s.T,
          .K = d,
          .alpha = alpha,
          .A = x + at(d),
          .lda = s.H * d,
          .B = y + at(d),
          .ldb = s.H * d,
          .C = out,
          .ldc = s.T,
          .precision = s.precision});
  }
  // c = op(m) x, m [T, T] (transposed when `trans`), x and c heads of width d.
  void times(bool trans, const float* m, const float* x, int64_t d, float* c) const {
    gemm({.trans_a = trans,
          .M = s.T,
          .N = d,
          .K = s.T,
          .A = m,
          .lda = s.T,
          .B = x + at(d),
          .ldb = s.H * d,
          .C = c + at(d),
          .ldc = s.H * d,
          .precision = s.precision});
  }
};

}  // namespace

void full_attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                            float* out, float* p) {
  check("full_attention_forward", s);
  const int64_t T = s.T;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const Head head{s, b, h};
      float* ph = p + (b * s.H + h) * T * T;
      // scores = scale · q kᵀ, then each row softmaxed in place; out = p v
      head.scores(s.effective_scale(), q, k, s.dqk, ph);
      for (int64_t t = 0; t < T; ++t) {
        float* row = ph + t * T;
        const float mx = *std::max_element(row, row + T);
        float sum = 0;
        for (int64_t u = 0; u < T; ++u) sum += row[u] = std::exp(row[u] - mx);
        for (int64_t u = 0; u < T; ++u) row[u] /= sum;
      }
      head.times(false, ph, v, s.dv, out);
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
      const Head head{s, b, h};
      const float* ph = p + (b * s.H + h) * T * T;
      head.times(true, ph, dout, s.dv, dv);  // dv = pᵀ dout
      // dp = dout vᵀ, then ds = scale · p ∘ (dp − Σ_u p dp) row by row
      head.scores(1.f, dout, v, s.dv, ds);
      for (int64_t t = 0; t < T; ++t) {
        const float* pr = ph + t * T;
        float* row = ds + t * T;
        float mean = 0;
        for (int64_t u = 0; u < T; ++u) mean += pr[u] * row[u];
        for (int64_t u = 0; u < T; ++u) row[u] = scale * pr[u] * (row[u] - mean);
      }
      head.times(false, ds, k, s.dqk, dq);  // dq = ds k
      head.times(true, ds, q, s.dqk, dk);   // dk = dsᵀ q
    }
}

}  // namespace k3::kernels
