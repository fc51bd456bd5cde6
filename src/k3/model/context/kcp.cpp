#include "k3/model/context/kcp.h"

#include <algorithm>

#include "k3/base/error.h"

namespace k3::model {
namespace {

using kernels::kda::DeltaRuleGrads;
using kernels::kda::DeltaRuleInputs;
using kernels::kda::DeltaRuleShape;

// The pair pass's shape and inputs: values [v | 0], initial state [0 | I] (V + K columns).
struct PairPass {
  DeltaRuleShape shape;
  std::vector<float> values, initial;
  DeltaRuleInputs<float> in;

  PairPass(const DeltaRuleShape& s, const DeltaRuleInputs<float>& base) : shape(s) {
    const int64_t K = s.K, V = s.V, W = V + K, rows = s.B * s.T * s.H;
    shape.V = W;
    values.assign(static_cast<size_t>(rows * W), 0.f);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(base.v + r * V, V, values.begin() + r * W);
    initial.assign(static_cast<size_t>(s.B * s.H * K * W), 0.f);
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      for (int64_t i = 0; i < K; ++i) initial[static_cast<size_t>((bh * K + i) * W + V + i)] = 1.f;
    in = {base.q, base.k, values.data(), base.g, base.beta, initial.data()};
  }
};

void check(const DeltaRuleShape& s, const dist::Comm& cp) {
  K3_CHECK(s.doc_starts.empty(),
           "KCP: packed documents are not supported under context parallelism");
  K3_CHECK(cp.size() >= 1, "KCP: empty group");
}

// For each (row, head): out = M X + add, with M the last K columns of `pair` ([K, V + K] rows),
// X and add [K, V]. out may be X.
void apply_m(const float* pair, const float* X, const float* add, float* out, int64_t K,
             int64_t V) {
  const int64_t W = V + K;
  std::vector<float> tmp(static_cast<size_t>(K * V));
  for (int64_t i = 0; i < K; ++i) {
    float* row = tmp.data() + i * V;
    for (int64_t c = 0; c < V; ++c) row[c] = add ? add[i * W + c] : 0.f;
    for (int64_t j = 0; j < K; ++j) {
      const float m = pair[i * W + V + j];
      const float* x = X + j * V;
      for (int64_t c = 0; c < V; ++c) row[c] += m * x[c];
    }
  }
  std::copy(tmp.begin(), tmp.end(), out);
}

// out = Mᵀ X + add (add [K, V] plain, may be out).
void apply_mt(const float* pair, const float* X, const float* add, float* out, int64_t K,
              int64_t V) {
  const int64_t W = V + K;
  std::vector<float> tmp(add, add + K * V);
  for (int64_t j = 0; j < K; ++j)
    for (int64_t i = 0; i < K; ++i) {
      const float m = pair[i * W + V + j];  // (Mᵀ)[j][i]
      const float* x = X + i * V;
      float* row = tmp.data() + j * V;
      for (int64_t c = 0; c < V; ++c) row[c] += m * x[c];
    }
  std::copy(tmp.begin(), tmp.end(), out);
}

}  // namespace

int64_t kcp_pair_floats(const DeltaRuleShape& s) { return s.B * s.H * s.K * (s.V + s.K); }
int64_t kcp_state_floats(const DeltaRuleShape& s) { return s.B * s.H * s.K * s.V; }

void kcp_span_pairs(const DeltaRuleShape& s, const DeltaRuleInputs<float>& in, float* pairs) {
  const PairPass p(s, in);
  std::vector<float> out(static_cast<size_t>(s.B * s.T * s.H * p.shape.V));
  kernels::kda::chunk_forward(p.shape, p.in, out.data(), pairs, nullptr);
}

void kcp_fold(const DeltaRuleShape& s, const float* pairs, int rank, float* state) {
  const int64_t K = s.K, V = s.V, heads = s.B * s.H, per = kcp_pair_floats(s);
  std::fill(state, state + kcp_state_floats(s), 0.f);
  for (int q = 0; q < rank; ++q)
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float* pair = pairs + q * per + bh * K * (V + K);
      float* S = state + bh * K * V;
      apply_m(pair, S, pair, S, K, V);
    }
}

void kcp_forward(const dist::Comm& cp, const DeltaRuleShape& s, const DeltaRuleInputs<float>& in,
                 float* out, const KcpSaved& saved) {
  check(s, cp);
  const int64_t per = kcp_pair_floats(s);
  kcp_span_pairs(s, in, saved.pairs + per * cp.rank());
  cp.all_gather(saved.pairs, std::vector<int64_t>(static_cast<size_t>(cp.size()), per));
  kcp_fold(s, saved.pairs, cp.rank(), saved.incoming);
  DeltaRuleInputs<float> from = in;
  from.initial_state = saved.incoming;
  kernels::kda::chunk_forward(s, from, out, nullptr, saved.chunk_saved);
}

void kcp_backward(const dist::Comm& cp, const DeltaRuleShape& s, const DeltaRuleInputs<float>& in,
                  const KcpSaved& saved, const float* dout, const DeltaRuleGrads<float>& grads) {
  check(s, cp);
  const int64_t K = s.K, V = s.V, W = V + K, heads = s.B * s.H, per = kcp_pair_floats(s),
                state = kcp_state_floats(s);
  const int P = cp.size(), r = cp.rank();
  // The normal pass, and the gradient of the state it started from.
  std::vector<float> dstates(static_cast<size_t>(state * P), 0.f);
  DeltaRuleInputs<float> from = in;
  from.initial_state = saved.incoming;
  DeltaRuleGrads<float> g = grads;
  g.dinitial_state = dstates.data() + state * r;
  kernels::kda::chunk_backward(s, from, saved.chunk_saved, dout, nullptr, g);
  cp.all_gather(dstates.data(), std::vector<int64_t>(static_cast<size_t>(P), state));
  if (r == P - 1) return;  // nothing after this span reads its pair

  // The transposed fold: T = Σ over later spans of what reaches this span's end.
  std::vector<float> T(static_cast<size_t>(state), 0.f);
  for (int j = P - 1; j > r; --j)
    for (int64_t bh = 0; bh < heads; ++bh)
      apply_mt(saved.pairs + j * per + bh * K * W, T.data() + bh * K * V,
               dstates.data() + j * state + bh * K * V, T.data() + bh * K * V, K, V);
  // [dS̃ | dM] with dM = T S_inᵀ.
  std::vector<float> dpair(static_cast<size_t>(per), 0.f);
  for (int64_t bh = 0; bh < heads; ++bh) {
    const float *t = T.data() + bh * K * V, *sin = saved.incoming + bh * K * V;
    float* d = dpair.data() + bh * K * W;
    for (int64_t i = 0; i < K; ++i) {
      std::copy_n(t + i * V, V, d + i * W);
      for (int64_t j = 0; j < K; ++j) {
        float acc = 0;
        for (int64_t c = 0; c < V; ++c) acc += t[i * V + c] * sin[j * V + c];
        d[i * W + V + j] = acc;
      }
    }
  }
  // The pair pass again (recomputed rather than kept), then its backward.
  const PairPass p(s, in);
  const int64_t rows = s.B * s.T * s.H;
  std::vector<float> out(static_cast<size_t>(rows * W)),
      records(static_cast<size_t>(kernels::kda::chunk_saved_floats(p.shape)));
  kernels::kda::chunk_forward(p.shape, p.in, out.data(), nullptr, records.data());
  std::fill(out.begin(), out.end(), 0.f);  // the pair pass's outputs feed nothing
  std::vector<float> dq(static_cast<size_t>(rows * K)), dk(dq.size()), dg(dq.size()),
      dv(static_cast<size_t>(rows * W)), dbeta(static_cast<size_t>(rows));
  kernels::kda::chunk_backward(p.shape, p.in, records.data(), out.data(), dpair.data(),
                               {dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), nullptr});
  for (int64_t i = 0; i < rows * K; ++i) {
    grads.dk[i] += dk[static_cast<size_t>(i)];
    grads.dg[i] += dg[static_cast<size_t>(i)];
  }
  for (int64_t i = 0; i < rows; ++i) {
    grads.dbeta[i] += dbeta[static_cast<size_t>(i)];
    for (int64_t c = 0; c < V; ++c) grads.dv[i * V + c] += dv[static_cast<size_t>(i * W + c)];
  }
}

}  // namespace k3::model
