// The recurrent reference: one token at a time, written for clarity. The backward keeps the state
// at the start of every segment of kSegment tokens, and recomputes a segment's states from there
// when it walks back through it: O(T/kSegment + kSegment) states per (sequence, head).
#include <algorithm>
#include <cmath>
#include <vector>

#include "k3/base/error.h"
#include "k3/kernels/kda/delta_rule.h"
#include "k3/kernels/kda/delta_rule_layout.h"

namespace k3::kernels::kda {
namespace {

constexpr int64_t kSegment = 64;

// One (sequence, head) of the inputs: row t of q is q + t * ldqk.
template <typename Real>
struct HeadInputs {
  const Real *q, *k, *v, *g, *beta;
  int64_t ldqk, ldv, ldbeta;

  HeadInputs(const DeltaRuleInputs<Real>& in, const layout::HeadRows& r)
      : q(in.q + r.qk),
        k(in.k + r.qk),
        v(in.v + r.v),
        g(in.g + r.qk),
        beta(in.beta + r.beta),
        ldqk(r.ldqk),
        ldv(r.ldv),
        ldbeta(r.ldbeta) {}
};

// Token t: S ← Diag(e^g) S; u = v − Sᵀk; S ← S + β k uᵀ (u written out for the backward).
template <typename Real>
void step(int64_t K, int64_t V, const HeadInputs<Real>& x, int64_t t, Real* S, Real* u) {
  const Real *k = x.k + t * x.ldqk, *v = x.v + t * x.ldv, *g = x.g + t * x.ldqk;
  const Real beta = x.beta[t * x.ldbeta];
  std::copy(v, v + V, u);
  for (int64_t c = 0; c < K; ++c) {
    const Real alpha = std::exp(g[c]);
    Real* row = S + c * V;
    for (int64_t j = 0; j < V; ++j) {
      row[j] *= alpha;
      u[j] -= k[c] * row[j];
    }
  }
  for (int64_t c = 0; c < K; ++c)
    for (int64_t j = 0; j < V; ++j) S[c * V + j] += beta * k[c] * u[j];
}

// o = Sᵀ q.
template <typename Real>
void read_out(int64_t K, int64_t V, const Real* S, const Real* q, Real* o) {
  std::fill(o, o + V, Real(0));
  for (int64_t c = 0; c < K; ++c)
    for (int64_t j = 0; j < V; ++j) o[j] += q[c] * S[c * V + j];
}

template <typename Real>
void load_state(const layout::HeadRows& r, int64_t KV, const Real* initial, Real* S) {
  if (initial)
    std::copy(initial + r.state, initial + r.state + KV, S);
  else
    std::fill(S, S + KV, Real(0));
}

// Backpropagates token t. S = state after t, prev = state before t, u from step(); dS holds the
// gradient w.r.t. S on entry and w.r.t. prev on exit.
template <typename Real>
void step_backward(int64_t K, int64_t V, const HeadInputs<Real>& x, int64_t t, const Real* S,
                   const Real* prev, const Real* u, const Real* dout, Real* dS, Real* du,
                   const layout::HeadRows& r, const DeltaRuleGrads<Real>& d) {
  const Real *q = x.q + t * x.ldqk, *k = x.k + t * x.ldqk, *g = x.g + t * x.ldqk;
  const Real beta = x.beta[t * x.ldbeta];
  const Real* dout_t = dout + r.v + t * r.ldv;
  Real *dq = d.dq + r.qk + t * r.ldqk, *dk = d.dk + r.qk + t * r.ldqk,
       *dg = d.dg + r.qk + t * r.ldqk;
  Real* dv = d.dv + r.v + t * r.ldv;
  // o = Sᵀq
  for (int64_t c = 0; c < K; ++c) {
    Real acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t j = 0; j < V; ++j) {
      acc += S[c * V + j] * dout_t[j];
      dS[c * V + j] += q[c] * dout_t[j];
    }
    dq[c] = acc;
  }
  // S = D + β k uᵀ with D = Diag(α) prev
  Real dbeta = 0;
  std::fill(du, du + V, Real(0));
  for (int64_t c = 0; c < K; ++c) {
    Real dS_u = 0;
#pragma omp simd reduction(+ : dS_u)
    for (int64_t j = 0; j < V; ++j) {
      dS_u += dS[c * V + j] * u[j];
      du[j] += beta * k[c] * dS[c * V + j];
    }
    dbeta += k[c] * dS_u;
    dk[c] = beta * dS_u;
  }
  d.dbeta[r.beta + t * r.ldbeta] = dbeta;
  std::copy(du, du + V, dv);
  // u = v − Dᵀk: dD = dS − k duᵀ; then D = Diag(α) prev
  for (int64_t c = 0; c < K; ++c) {
    const Real alpha = std::exp(g[c]);
    Real d_alpha = 0, D_du = 0;
#pragma omp simd reduction(+ : d_alpha, D_du)
    for (int64_t j = 0; j < V; ++j) {
      const Real dD = dS[c * V + j] - k[c] * du[j];
      D_du += alpha * prev[c * V + j] * du[j];
      d_alpha += dD * prev[c * V + j];
      dS[c * V + j] = alpha * dD;
    }
    dk[c] -= D_du;
    dg[c] = alpha * d_alpha;
  }
}

}  // namespace

template <typename Real>
void recurrent_forward(const DeltaRuleShape& s, const DeltaRuleInputs<Real>& in, Real* out,
                       Real* final_state) {
  layout::check_shape("kda recurrent_forward", s);
  layout::check_pointers("kda recurrent_forward", s, in.q, in.k, in.v, in.g, in.beta);
  const int64_t KV = s.K * s.V, heads = s.num_sequences() * s.H;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < heads; ++i) {
    const layout::HeadRows r = layout::head_rows(s, i);
    const HeadInputs<Real> x(in, r);
    std::vector<Real> S(KV), u(s.V);
    load_state(r, KV, in.initial_state, S.data());
    for (int64_t t = 0; t < r.length; ++t) {
      step(s.K, s.V, x, t, S.data(), u.data());
      read_out(s.K, s.V, S.data(), x.q + t * x.ldqk, out + r.v + t * r.ldv);
    }
    if (final_state) std::copy(S.begin(), S.end(), final_state + r.state);
  }
}

template <typename Real>
void recurrent_backward(const DeltaRuleShape& s, const DeltaRuleInputs<Real>& in, const Real* dout,
                        const Real* dfinal_state, const DeltaRuleGrads<Real>& grads) {
  layout::check_shape("kda recurrent_backward", s);
  layout::check_pointers("kda recurrent_backward", s, in.q, in.k, in.v, in.g, in.beta);
  layout::check_pointers("kda recurrent_backward", s, grads.dq, grads.dk, grads.dv, grads.dg,
                         grads.dbeta);
  K3_CHECK(s.B * s.T == 0 || dout, "kda recurrent_backward: dout is required");
  const int64_t KV = s.K * s.V, heads = s.num_sequences() * s.H;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < heads; ++i) {
    const layout::HeadRows r = layout::head_rows(s, i);
    const HeadInputs<Real> x(in, r);
    const int64_t segments = (r.length + kSegment - 1) / kSegment;
    // checkpoints[j]: state before token j * kSegment.
    std::vector<Real> checkpoints(static_cast<size_t>(std::max<int64_t>(segments, 1) * KV));
    std::vector<Real> states(static_cast<size_t>((kSegment + 1) * KV)), u(kSegment * s.V);
    std::vector<Real> dS(KV), du(s.V);
    load_state(r, KV, in.initial_state, states.data());
    for (int64_t j = 0; j < segments; ++j) {
      std::copy(states.begin(), states.begin() + KV, checkpoints.begin() + j * KV);
      for (int64_t t = j * kSegment; t < std::min(r.length, (j + 1) * kSegment); ++t)
        step(s.K, s.V, x, t, states.data(), u.data());
    }
    if (dfinal_state) std::copy(dfinal_state + r.state, dfinal_state + r.state + KV, dS.begin());
    for (int64_t j = segments - 1; j >= 0; --j) {
      const int64_t t0 = j * kSegment, n = std::min(r.length - t0, kSegment);
      // states[m]: state before token t0 + m.
      std::copy(checkpoints.begin() + j * KV, checkpoints.begin() + (j + 1) * KV, states.begin());
      for (int64_t m = 0; m < n; ++m) {
        std::copy(states.begin() + m * KV, states.begin() + (m + 1) * KV,
                  states.begin() + (m + 1) * KV);
        step(s.K, s.V, x, t0 + m, states.data() + (m + 1) * KV, u.data() + m * s.V);
      }
      for (int64_t m = n - 1; m >= 0; --m)
        step_backward(s.K, s.V, x, t0 + m, states.data() + (m + 1) * KV, states.data() + m * KV,
                      u.data() + m * s.V, dout, dS.data(), du.data(), r, grads);
    }
    if (grads.dinitial_state) std::copy(dS.begin(), dS.end(), grads.dinitial_state + r.state);
  }
}

#define K3_KDA_INSTANTIATE(Real)                                                              \
  template void recurrent_forward<Real>(const DeltaRuleShape&, const DeltaRuleInputs<Real>&,  \
                                        Real*, Real*);                                        \
  template void recurrent_backward<Real>(const DeltaRuleShape&, const DeltaRuleInputs<Real>&, \
                                         const Real*, const Real*, const DeltaRuleGrads<Real>&);
K3_KDA_INSTANTIATE(float)
K3_KDA_INSTANTIATE(double)
#undef K3_KDA_INSTANTIATE

}  // namespace k3::kernels::kda
