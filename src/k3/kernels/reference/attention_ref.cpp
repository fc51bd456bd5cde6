#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "k3/kernels/reference.h"

namespace k3::ref {
namespace {

// Pointers into the [B, T, H, dim] layouts for one (batch, head).
template <typename T>
struct HeadView {
  const kernels::AttentionShape& s;
  int64_t b, h;
  int64_t dqt() const { return s.dqk + s.dr; }
  int64_t row(int64_t t) const { return (b * s.T + t) * s.H + h; }
  int64_t last_key(int64_t t) const { return s.causal ? t : s.T - 1; }
  T score(const T* q, const T* k, const T* kr, int64_t t, int64_t u) const {
    const T* qt = q + row(t) * dqt();
    const T* ku = k + row(u) * s.dqk;
    T acc = 0;
    for (int64_t c = 0; c < s.dqk; ++c) acc += qt[c] * ku[c];
    for (int64_t c = 0; c < s.dr; ++c) acc += qt[s.dqk + c] * kr[(b * s.T + u) * s.dr + c];
    return acc * static_cast<T>(s.effective_scale());
  }
  // All scores of head (b, h), softmaxed along keys u <= last_key(t): P [T, T], zero above the
  // diagonal when causal.
  std::vector<T> probabilities(const T* q, const T* k, const T* kr, T* lse) const {
    std::vector<T> p(static_cast<size_t>(s.T * s.T), T(0));
    for (int64_t t = 0; t < s.T; ++t) {
      T* pt = p.data() + t * s.T;
      T mx = -std::numeric_limits<T>::infinity();
      const int64_t last = last_key(t);
      for (int64_t u = 0; u <= last; ++u) mx = std::max(mx, pt[u] = score(q, k, kr, t, u));
      T sum = 0;
      for (int64_t u = 0; u <= last; ++u) sum += pt[u] = std::exp(pt[u] - mx);
      for (int64_t u = 0; u <= last; ++u) pt[u] /= sum;
      if (lse) lse[(b * s.H + h) * s.T + t] = mx + std::log(sum);
    }
    return p;
  }
};

}  // namespace

template <typename T>
void attention_forward(const kernels::AttentionShape& s, const T* q, const T* k, const T* kr,
                       const T* v, T* out, T* lse) {
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const HeadView<T> hv{s, b, h};
      const std::vector<T> p = hv.probabilities(q, k, kr, lse);
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t last = hv.last_key(t);
        T* o = out + hv.row(t) * s.dv;
        std::fill(o, o + s.dv, T(0));
        for (int64_t u = 0; u <= last; ++u)
          for (int64_t c = 0; c < s.dv; ++c) o[c] += p[t * s.T + u] * v[hv.row(u) * s.dv + c];
      }
    }
}

template <typename T>
void attention_backward(const kernels::AttentionShape& s, const T* q, const T* k, const T* kr,
                        const T* v, const T* dout, T* dq, T* dk, T* dkr, T* dv) {
  const int64_t dqt = s.dqk + s.dr, n = s.B * s.T * s.H;
  const T scale = static_cast<T>(s.effective_scale());
  std::fill(dq, dq + n * dqt, T(0));
  std::fill(dk, dk + n * s.dqk, T(0));
  std::fill(dv, dv + n * s.dv, T(0));
  if (s.dr > 0) std::fill(dkr, dkr + s.B * s.T * s.dr, T(0));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const HeadView<T> hv{s, b, h};
      const std::vector<T> p = hv.probabilities(q, k, kr, nullptr);
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t last = hv.last_key(t);
        const T* g = dout + hv.row(t) * s.dv;
        // dL/ds_u = p_u (dp_u - sum_w p_w dp_w) with dp_u = <dout_t, v_u>.
        std::vector<T> dp(static_cast<size_t>(last + 1), T(0));
        T mean = 0;
        for (int64_t u = 0; u <= last; ++u) {
          for (int64_t c = 0; c < s.dv; ++c) dp[u] += g[c] * v[hv.row(u) * s.dv + c];
          mean += p[t * s.T + u] * dp[u];
        }
        const T* qt = q + hv.row(t) * dqt;
        T* dqt_row = dq + hv.row(t) * dqt;
        for (int64_t u = 0; u <= last; ++u) {
          const T pu = p[t * s.T + u], ds = scale * pu * (dp[u] - mean);
          for (int64_t c = 0; c < s.dv; ++c) dv[hv.row(u) * s.dv + c] += pu * g[c];
          for (int64_t c = 0; c < s.dqk; ++c) {
            dqt_row[c] += ds * k[hv.row(u) * s.dqk + c];
            dk[hv.row(u) * s.dqk + c] += ds * qt[c];
          }
          for (int64_t c = 0; c < s.dr; ++c) {
            dqt_row[s.dqk + c] += ds * kr[(b * s.T + u) * s.dr + c];
            dkr[(b * s.T + u) * s.dr + c] += ds * qt[s.dqk + c];
          }
        }
      }
    }
}

template void attention_forward<float>(const kernels::AttentionShape&, const float*, const float*,
                                       const float*, const float*, float*, float*);
template void attention_forward<double>(const kernels::AttentionShape&, const double*,
                                        const double*, const double*, const double*, double*,
                                        double*);
template void attention_backward<float>(const kernels::AttentionShape&, const float*, const float*,
                                        const float*, const float*, const float*, float*, float*,
                                        float*, float*);
template void attention_backward<double>(const kernels::AttentionShape&, const double*,
                                         const double*, const double*, const double*, const double*,
                                         double*, double*, double*, double*);

}  // namespace k3::ref
