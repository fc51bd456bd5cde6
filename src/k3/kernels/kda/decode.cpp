#include "k3/kernels/kda/decode.h"

#include <cmath>
#include <vector>

#include "k3/kernels/kda/head_norm.h"
#include "k3/kernels/kda/rows.h"

namespace k3::kernels::kda {
namespace {

// Short convolution + SiLU of channels [c0, c0 + D) for one token x, shifting the token into the
// window [K−1, P] (oldest row first). The sum starts from the newest tap, w[K−1] · x, then adds
// the window's taps oldest first; short_conv_forward adds all K taps oldest first (x last), so
// the two may differ in the last bits.
void conv_step(const float* w, float* window, const float* x, int64_t K, int64_t P, int64_t c0,
               int64_t D, float* out) {
  for (int64_t c = c0; c < c0 + D; ++c) {
    float z = w[c * K + K - 1] * x[c];
    for (int64_t j = 0; j + 1 < K; ++j) z += w[c * K + j] * window[j * P + c];
    for (int64_t j = 0; j + 2 < K; ++j) window[j * P + c] = window[(j + 1) * P + c];
    if (K > 1) window[(K - 2) * P + c] = x[c];
    out[c - c0] = rows::silu(z);
  }
}

}  // namespace

// The state update and readout in two passes over S: first decay the rows by e^g while collecting
// kᵀS and qᵀS, then add β k uᵀ with u = v − kᵀS. The output needs no third pass:
// o = (S + β k uᵀ)ᵀ q = Sᵀq + β (k·q) u.
void decode_step(const DecodeParams& p, const DecodeToken& in, std::span<const DecodeState> st,
                 float* y) {
  const int64_t B = static_cast<int64_t>(st.size()), H = p.H, D = p.D, K = p.conv_kernel, P = H * D;
  const GateParams gp{1, H, D, p.bounded_gate, p.gate_lower_bound};
#pragma omp parallel if (B * H * D * D > 65536)
  {
    std::vector<float> scratch(static_cast<size_t>(7 * D));
    float *q = scratch.data(), *k = q + D, *v = k + D, *g = v + D, *kS = g + D, *qS = kS + D,
          *o = qS + D;
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t c0 = h * D, row = b * P + c0;
        const DecodeState& sb = st[static_cast<size_t>(b)];
        conv_step(p.q_conv, sb.q_window, in.q + b * P, K, P, c0, D, q);
        conv_step(p.k_conv, sb.k_window, in.k + b * P, K, P, c0, D, k);
        conv_step(p.v_conv, sb.v_window, in.v + b * P, K, P, c0, D, v);
        rows::l2norm_row(q, q, D, 1.0f / std::sqrt(static_cast<float>(D)), kL2NormEps);
        rows::l2norm_row(k, k, D, 1.0f, kL2NormEps);
        rows::gate_row(gp, std::exp(p.A_log[h]), in.f + row, p.dt_bias + c0, g);
        const float beta = fast::sigmoid(in.beta_logit[b * H + h]);

        float* S = sb.S + h * D * D;
        float kq = 0;
        for (int64_t j = 0; j < D; ++j) kS[j] = qS[j] = 0;
        for (int64_t i = 0; i < D; ++i) {
          const float decay = std::exp(g[i]), ki = k[i], qi = q[i];
          float* Si = S + i * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) {
            Si[j] *= decay;
            kS[j] += ki * Si[j];
            qS[j] += qi * Si[j];
          }
          kq += ki * qi;
        }
#pragma omp simd
        for (int64_t j = 0; j < D; ++j) {
          v[j] -= kS[j];  // u
          o[j] = qS[j] + beta * kq * v[j];
        }
        for (int64_t i = 0; i < D; ++i) {
          const float bk = beta * k[i];
          float* Si = S + i * D;
#pragma omp simd
          for (int64_t j = 0; j < D; ++j) Si[j] += bk * v[j];
        }
        rows::gated_rmsnorm_row(o, p.o_norm, in.gate + row, y + row, D, p.norm_eps);
      }
  }
}

}  // namespace k3::kernels::kda
