#include <algorithm>
#include <cmath>
#include <vector>

#include "k3/kernels/reference.h"

namespace k3::ref {

template <typename T>
void attn_res_forward(const T* const* rows, int64_t n, int64_t N, int64_t d, const T* nw, const T* pw,
                      T eps, T* out) {
  for (int64_t t = 0; t < N; ++t) {
    std::vector<T> logit(static_cast<size_t>(n));
    T mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      const T* z = rows[i] + t * d;
      T ss = 0, zw = 0;
      for (int64_t c = 0; c < d; ++c) {
        ss += z[c] * z[c];
        zw += z[c] * nw[c] * pw[c];
      }
      logit[static_cast<size_t>(i)] = zw / std::sqrt(ss / T(d) + eps);
      mx = std::max(mx, logit[static_cast<size_t>(i)]);
    }
    T sum = 0;
    for (auto& l : logit) sum += (l = std::exp(l - mx));
    for (int64_t c = 0; c < d; ++c) {
      T o = 0;
      for (int64_t i = 0; i < n; ++i) o += logit[static_cast<size_t>(i)] / sum * rows[i][t * d + c];
      out[t * d + c] = o;
    }
  }
}

// Written from the chain rule one quantity at a time: alpha -> logits -> (rho, <z, w>) -> z, w.
template <typename T>
void attn_res_backward(const T* const* rows, int64_t n, int64_t N, int64_t d, const T* nw, const T* pw,
                       T eps, const T* dout, T* const* d_rows, T* dnw, T* dpw) {
  for (int64_t t = 0; t < N; ++t) {
    std::vector<T> rho(static_cast<size_t>(n)), zw(static_cast<size_t>(n)), alpha(static_cast<size_t>(n));
    T mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      const T* z = rows[i] + t * d;
      T ss = 0, s = 0;
      for (int64_t c = 0; c < d; ++c) {
        ss += z[c] * z[c];
        s += z[c] * nw[c] * pw[c];
      }
      rho[static_cast<size_t>(i)] = T(1) / std::sqrt(ss / T(d) + eps);
      zw[static_cast<size_t>(i)] = s;
      alpha[static_cast<size_t>(i)] = rho[static_cast<size_t>(i)] * s;
      mx = std::max(mx, alpha[static_cast<size_t>(i)]);
    }
    T sum = 0;
    for (auto& a : alpha) sum += (a = std::exp(a - mx));
    for (auto& a : alpha) a /= sum;
    const T* g = dout + t * d;
    std::vector<T> dalpha(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) dalpha[static_cast<size_t>(i)] += g[c] * rows[i][t * d + c];
    T mean = 0;
    for (int64_t i = 0; i < n; ++i) mean += alpha[static_cast<size_t>(i)] * dalpha[static_cast<size_t>(i)];
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      const T dlogit = alpha[k] * (dalpha[k] - mean);
      const T drho = dlogit * zw[k], dzw = dlogit * rho[k];
      const T* z = rows[i] + t * d;
      for (int64_t c = 0; c < d; ++c) {
        // rho = (mean z² + eps)^(-1/2): d rho / d z_c = -rho³ z_c / d.
        d_rows[i][t * d + c] += alpha[k] * g[c] + dzw * nw[c] * pw[c] - drho * rho[k] * rho[k] * rho[k] * z[c] / T(d);
        dnw[c] += dzw * z[c] * pw[c];
        dpw[c] += dzw * z[c] * nw[c];
      }
    }
  }
}

#define K3_INSTANTIATE(T)                                                                          \
  template void attn_res_forward<T>(const T* const*, int64_t, int64_t, int64_t, const T*, const T*, T, \
                                    T*);                                                           \
  template void attn_res_backward<T>(const T* const*, int64_t, int64_t, int64_t, const T*, const T*, \
                                     T, const T*, T* const*, T*, T*);
K3_INSTANTIATE(float)
K3_INSTANTIATE(double)
#undef K3_INSTANTIATE

}  // namespace k3::ref
