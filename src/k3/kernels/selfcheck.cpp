#include "k3/kernels/selfcheck.h"

#include <cmath>
#include <random>

#include "k3/kernels/adamw.h"
#include "k3/kernels/attention.h"
#include "k3/kernels/cross_entropy.h"
#include "k3/kernels/embedding.h"
#include "k3/kernels/gemm.h"
#include "k3/kernels/glu.h"
#include "k3/kernels/reference.h"
#include "k3/kernels/rmsnorm.h"
#include "k3/kernels/rope.h"

namespace k3::kernels {
namespace {

using Doubles = std::vector<double>;
using Floats = std::vector<float>;

Doubles widen(const Floats& v) { return Doubles(v.begin(), v.end()); }

// Random inputs and the list of results. Fast kernels run in fp32, references in double on the
// same (widened) inputs.
class Checks {
 public:
  explicit Checks(uint64_t seed) : rng_(seed) {}

  Floats uniform(int64_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> dist(lo, hi);
    Floats v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(dist(rng_));
    return v;
  }
  std::vector<int32_t> tokens(int64_t n, int32_t vocab) {
    std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = dist(rng_);
    return v;
  }

  void add(std::string name, const Floats& fast, const Doubles& ref, double tolerance) {
    double err = fast.size() == ref.size() ? 0 : INFINITY;
    for (size_t i = 0; i < fast.size() && i < ref.size(); ++i) {
      const double e = std::abs(fast[i] - ref[i]) / (1 + std::abs(ref[i]));
      if (!(e <= err)) err = e;  // NaN sticks
    }
    results_.push_back({std::move(name), err, tolerance, err <= tolerance});
  }

  std::vector<SelfcheckResult> take() { return std::move(results_); }

 private:
  std::mt19937_64 rng_;
  std::vector<SelfcheckResult> results_;
};

void check_gemm(Checks& c) {
  const int64_t M = 37, N = 29, K = 53, lda = 61, ldb = 59, ldc = 31;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Floats A = c.uniform((ta ? K : M) * lda), B = c.uniform((tb ? N : K) * ldb);
      Floats C = c.uniform(M * ldc);
      Doubles Cr = widen(C);
      gemm(GemmArgs{ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.5f, C.data(), ldc});
      ref::gemm<double>(ta, tb, M, N, K, 0.7, widen(A).data(), lda, widen(B).data(), ldb, 0.5,
                        Cr.data(), ldc);
      c.add(std::string("gemm ") + (ta ? 'T' : 'N') + (tb ? 'T' : 'N'), C, Cr, 1e-5);
    }
}

void check_embedding(Checks& c) {
  const int64_t n = 300, vocab = 50, dim = 37;
  const auto tok = c.tokens(n, vocab);
  const Floats table = c.uniform(vocab * dim), dout = c.uniform(n * dim);
  Floats out(n * dim), dtable = c.uniform(vocab * dim);
  Doubles out_r(n * dim), dtable_r = widen(dtable);
  embedding_forward(tok.data(), n, table.data(), vocab, dim, out.data());
  ref::embedding_forward<double>(tok.data(), n, widen(table).data(), dim, out_r.data());
  c.add("embedding forward", out, out_r, 0);
  embedding_backward(tok.data(), n, dout.data(), vocab, dim, dtable.data());
  ref::embedding_backward<double>(tok.data(), n, widen(dout).data(), dim, dtable_r.data());
  c.add("embedding backward", dtable, dtable_r, 1e-6);
}

void check_rmsnorm(Checks& c) {
  const int64_t rows = 33, dim = 200;
  const Floats x = c.uniform(rows * dim), w = c.uniform(dim, 0.5, 1.5), dy = c.uniform(rows * dim);
  Floats y(rows * dim), rstd(rows), dx(rows * dim), dw = c.uniform(dim);
  Doubles y_r(rows * dim), rstd_r(rows), dx_r(rows * dim), dw_r = widen(dw);
  rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, 1e-6f);
  ref::rmsnorm_forward<double>(widen(x).data(), widen(w).data(), y_r.data(), rstd_r.data(), rows,
                               dim, 1e-6);
  c.add("rmsnorm forward", y, y_r, 1e-6);
  rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows, dim);
  ref::rmsnorm_backward<double>(widen(x).data(), widen(w).data(), rstd_r.data(), widen(dy).data(),
                                dx_r.data(), dw_r.data(), rows, dim);
  c.add("rmsnorm backward dx", dx, dx_r, 1e-5);
  c.add("rmsnorm backward dweight", dw, dw_r, 1e-5);
}

void check_glu(Checks& c) {
  const int64_t n = 1001;
  for (GluKind kind : {GluKind::SiTU, GluKind::SiLU}) {
    const std::string name = kind == GluKind::SiTU ? "situ glu" : "silu glu";
    const GluParams p{kind};
    const Floats g = c.uniform(n, -12, 12), u = c.uniform(n, -40, 40), dh = c.uniform(n);
    Floats h(n), dg(n), du(n);
    Doubles h_r(n), dg_r(n), du_r(n);
    glu_forward(p, g.data(), u.data(), h.data(), n);
    ref::glu_forward<double>(p, widen(g).data(), widen(u).data(), h_r.data(), n);
    c.add(name + " forward", h, h_r, 1e-5);
    glu_backward(p, g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
    ref::glu_backward<double>(p, widen(g).data(), widen(u).data(), widen(dh).data(), dg_r.data(),
                              du_r.data(), n);
    c.add(name + " backward dg", dg, dg_r, 1e-5);
    c.add(name + " backward du", du, du_r, 1e-5);
  }
}

void check_lm_head(Checks& c) {
  const int64_t N = 45, d = 24, V = 67, chunk = 16;
  const Floats h = c.uniform(N * d), w = c.uniform(V * d);
  auto targets = c.tokens(N, static_cast<int32_t>(V));
  for (int64_t i = 0; i < N; i += 7) targets[i] = -100;
  Floats ws(chunk * V), dh(N * d), dw = c.uniform(V * d);
  Doubles dh_r(N * d), dw_r = widen(dw);
  const float scale = 1.0f / static_cast<float>(N);
  const LossSum loss = lm_head_cross_entropy({h.data(), w.data(), targets.data(), N, d, V, -100,
                                              scale, chunk, ws.data(), dh.data(), dw.data()});
  int64_t count = 0;
  const double loss_r =
      ref::lm_head_cross_entropy<double>(widen(h).data(), widen(w).data(), targets.data(), N, d, V,
                                         -100, scale, dh_r.data(), dw_r.data(), &count);
  c.add("lm_head+ce loss", {static_cast<float>(loss.sum / N)}, {loss_r / N}, 1e-6);
  c.add("lm_head+ce count", {static_cast<float>(loss.count)}, {static_cast<double>(count)}, 0);
  c.add("lm_head+ce dh", dh, dh_r, 1e-6);
  c.add("lm_head+ce dw", dw, dw_r, 1e-6);
}

void check_adamw(Checks& c) {
  const int64_t n = 777;
  Floats p = c.uniform(n), m(n, 0), v(n, 0);
  Doubles p_r = widen(p), m_r(n, 0), v_r(n, 0);
  AdamWParams hp;
  hp.grad_scale = 0.5f;
  for (hp.step = 1; hp.step <= 3; ++hp.step) {
    const Floats g = c.uniform(n);
    adamw_step(hp, p.data(), g.data(), m.data(), v.data(), n);
    ref::adamw_step<double>(hp, p_r.data(), widen(g).data(), m_r.data(), v_r.data(), n);
  }
  c.add("adamw", p, p_r, 1e-6);
}

void check_attention(Checks& c) {
  const AttentionShape s{2, 150, 3, 16, 8, 12, 0};  // two tiles, the second ragged
  const int64_t n = s.B * s.T * s.H, nq = n * (s.dqk + s.dr), nk = n * s.dqk, nv = n * s.dv,
                nr = s.B * s.T * s.dr;
  const Floats q = c.uniform(nq), k = c.uniform(nk), kr = c.uniform(nr), v = c.uniform(nv),
               dout = c.uniform(nv);
  Floats out(nv), lse(n), dq(nq), dk(nk), dkr(nr), dv(nv);
  Doubles out_r(nv), lse_r(n), dq_r(nq), dk_r(nk), dkr_r(nr), dv_r(nv);
  attention_forward(s, q.data(), k.data(), kr.data(), v.data(), out.data(), lse.data());
  attention_backward(s, q.data(), k.data(), kr.data(), v.data(), out.data(), lse.data(),
                     dout.data(), dq.data(), dk.data(), dkr.data(), dv.data());
  const Doubles qd = widen(q), kd = widen(k), krd = widen(kr), vd = widen(v);
  ref::attention_forward<double>(s, qd.data(), kd.data(), krd.data(), vd.data(), out_r.data(),
                                 lse_r.data());
  ref::attention_backward<double>(s, qd.data(), kd.data(), krd.data(), vd.data(),
                                  widen(dout).data(), dq_r.data(), dk_r.data(), dkr_r.data(),
                                  dv_r.data());
  c.add("attention out", out, out_r, 1e-5);
  c.add("attention lse", lse, lse_r, 1e-5);
  c.add("attention dq", dq, dq_r, 1e-5);
  c.add("attention dk", dk, dk_r, 1e-5);
  c.add("attention dkr", dkr, dkr_r, 1e-5);
  c.add("attention dv", dv, dv_r, 1e-5);
}

// MLA's layout: the last 8 of each head's 24 values turned, at positions up to Llama 3's context,
// with its scaled frequencies.
void check_rope(Checks& c) {
  const RopeLayout l{37, 3, 8, 3 * 24, 24};
  const std::vector<double> f = rope_frequencies(l.d, 5e5, {8, 1, 4, 8192});
  std::vector<int64_t> pos(static_cast<size_t>(l.rows));
  for (int64_t r = 0; r < l.rows; ++r) pos[static_cast<size_t>(r)] = (r * 3571) % 131072;
  Floats x = c.uniform(l.rows * l.ld_row), dy = c.uniform(l.rows * l.ld_row);
  Doubles x_r = widen(x), dy_r = widen(dy);
  rope_forward(l, f.data(), pos.data(), x.data());
  rope_backward(l, f.data(), pos.data(), dy.data());
  ref::rope_forward<double>(l, f.data(), pos.data(), x_r.data());
  ref::rope_backward<double>(l, f.data(), pos.data(), dy_r.data());
  c.add("rope forward", x, x_r, 1e-6);
  c.add("rope backward", dy, dy_r, 1e-6);
}

}  // namespace

std::vector<SelfcheckResult> run_selfchecks(uint64_t seed) {
  Checks checks(seed);
  // One entry per kernel; each adds one or more results.
  for (auto* check : {check_gemm, check_embedding, check_rmsnorm, check_glu, check_lm_head,
                      check_adamw, check_attention, check_rope})
    check(checks);
  return checks.take();
}

}  // namespace k3::kernels
