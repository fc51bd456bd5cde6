#include "k3/model/context/ring_attention.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/kernels/attention.h"
#include "k3/kernels/attention_block.h"
#include "k3/model/context/documents.h"

namespace k3::model {
namespace {

constexpr int kLatentTag = 72, kGradientTag = 73;
using Buf = std::vector<float>;

// Chunk `slot` (0 or 1) of rows laid out [B, 2C, width], as [B, C, width]; and back (adding).
Buf chunk_of(const float* x, const RingShape& s, int64_t width, int slot) {
  Buf out;
  out.reserve(static_cast<size_t>(s.B * s.C * width));
  for (int64_t b = 0; b < s.B; ++b) {
    const float* at = x + (b * 2 * s.C + slot * s.C) * width;
    out.insert(out.end(), at, at + s.C * width);
  }
  return out;
}
void add_chunk(float* x, const RingShape& s, int64_t width, int slot, const Buf& part) {
  for (int64_t b = 0; b < s.B; ++b) {
    float* at = x + (b * 2 * s.C + slot * s.C) * width;
    const float* from = part.data() + b * s.C * width;
    for (int64_t i = 0; i < s.C * width; ++i) at[i] += from[i];
  }
}
// lse [B, H, 2C] and its chunk [B, H, C].
Buf lse_chunk(const float* lse, const RingShape& s, int slot) {
  Buf out;
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    out.insert(out.end(), lse + bh * 2 * s.C + slot * s.C, lse + bh * 2 * s.C + (slot + 1) * s.C);
  return out;
}

// The global chunk in slot `slot` of rank `rank`.
int chunk_id(int rank, int slot, int ranks) { return slot == 0 ? rank : 2 * ranks - 1 - rank; }

// One held block, expanded: per slot, k_n, k_r and v of its chunk.
struct Keys {
  Buf k_n[2], k_r[2], v[2];
  Keys(const RingShape& s, const float* latent, const ExpandKv& expand) {
    const int64_t rows = s.rows();
    Buf c(static_cast<size_t>(rows * s.r_kv)), kr(static_cast<size_t>(rows * s.d_r));
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(latent + i * s.latent(), s.r_kv, c.begin() + i * s.r_kv);
      std::copy_n(latent + i * s.latent() + s.r_kv, s.d_r, kr.begin() + i * s.d_r);
    }
    Buf kn(static_cast<size_t>(rows * s.H * s.d_n)), vv(static_cast<size_t>(rows * s.H * s.d_v));
    expand(c.data(), rows, kn.data(), vv.data());
    for (int slot = 0; slot < 2; ++slot) {
      k_n[slot] = chunk_of(kn.data(), s, s.H * s.d_n, slot);
      k_r[slot] = chunk_of(kr.data(), s, s.d_r, slot);
      v[slot] = chunk_of(vv.data(), s, s.H * s.d_v, slot);
    }
  }
};

kernels::AttentionShape chunk_shape(const RingShape& s) {
  return {s.B, s.C, s.H, s.d_n, s.d_r, s.d_v, 0.f};
}

// The first key of chunk kc (of C tokens) that a run of query chunk qc sees: on the diagonal the
// run's own first row, in an earlier chunk its document's start (C or more: none).
int64_t first_key(const DocumentRun& run, int qc, int kc, int64_t C) {
  return kc == qc ? run.begin : std::max<int64_t>(run.start - kc * C, 0);
}

// Query chunk qc against key chunk kc over packed documents, run by run, merged into acc and
// acc_lse ([C, H, d_v] and [H, C]).
void forward_runs(const RingShape& s, int qc, int kc, const float* q, const float* kn,
                  const float* kr, const float* v, float* acc, float* acc_lse) {
  const int64_t C = s.C, H = s.H, dq = s.d_n + s.d_r;
  for (const DocumentRun& run : document_runs(s.documents, qc * C, C)) {
    const int64_t n = run.end - run.begin, k0 = first_key(run, qc, kc, C);
    if (k0 >= C) continue;
    const kernels::AttentionShape cs{1, n, H, s.d_n, s.d_r, s.d_v, 0.f};
    const float *qr = q + run.begin * H * dq, *knr = kn + k0 * H * s.d_n, *krr = kr + k0 * s.d_r,
                *vr = v + k0 * H * s.d_v;
    Buf out(static_cast<size_t>(n * H * s.d_v)), lse(static_cast<size_t>(H * n));
    if (kc == qc)
      kernels::attention_forward(cs, qr, knr, krr, vr, out.data(), lse.data());
    else
      kernels::attention_block_forward(cs, n, C - k0, qr, knr, krr, vr, out.data(), lse.data());
    Buf merged = run_lse(acc_lse, H, C, run);
    kernels::attention_merge(1, n, H, s.d_v, acc + run.begin * H * s.d_v, merged.data(), out.data(),
                             lse.data());
    put_run_lse(acc_lse, H, C, run, merged.data());
  }
}

// Its backward: accumulates dq ([C, H, d_n + d_r]) and the key chunk's gk, gkr, gv.
void backward_runs(const RingShape& s, int qc, int kc, const float* q, const float* kn,
                   const float* kr, const float* v, const float* out, const float* lse,
                   const float* dout, float* dq, float* gk, float* gkr, float* gv) {
  const int64_t C = s.C, H = s.H, dqd = s.d_n + s.d_r;
  for (const DocumentRun& run : document_runs(s.documents, qc * C, C)) {
    const int64_t n = run.end - run.begin, k0 = first_key(run, qc, kc, C);
    if (k0 >= C) continue;
    const kernels::AttentionShape cs{1, n, H, s.d_n, s.d_r, s.d_v, 0.f};
    const int64_t qo = run.begin * H * dqd, oo = run.begin * H * s.d_v;
    const int64_t ko = k0 * H * s.d_n, kro = k0 * s.d_r, vo = k0 * H * s.d_v;
    const Buf l = run_lse(lse, H, C, run);
    if (kc != qc) {
      kernels::attention_block_backward(cs, n, C - k0, q + qo, kn + ko, kr + kro, v + vo, out + oo,
                                        l.data(), dout + oo, dq + qo, gk + ko, gkr + kro, gv + vo);
      continue;
    }
    Buf tq(static_cast<size_t>(n * H * dqd)), tk(static_cast<size_t>(n * H * s.d_n)),
        tkr(static_cast<size_t>(n * s.d_r)), tv(static_cast<size_t>(n * H * s.d_v));
    kernels::attention_backward(cs, q + qo, kn + ko, kr + kro, v + vo, out + oo, l.data(),
                                dout + oo, tq.data(), tk.data(), tkr.data(), tv.data());
    for (size_t i = 0; i < tq.size(); ++i) dq[qo + i] += tq[i];
    for (size_t i = 0; i < tk.size(); ++i) gk[ko + i] += tk[i];
    for (size_t i = 0; i < tkr.size(); ++i) gkr[kro + i] += tkr[i];
    for (size_t i = 0; i < tv.size(); ++i) gv[vo + i] += tv[i];
  }
}

// Sends `mine` to the next rank and receives the previous rank's block into `from_previous`.
struct RingStep {
  dist::Request send, recv;
  RingStep(const dist::Comm& cp, const float* mine, float* from_previous, int64_t n, int tag) {
    const int P = cp.size(), r = cp.rank();
    recv = cp.recv_async(from_previous, n, (r + P - 1) % P, tag);
    send = cp.send_async(mine, n, (r + 1) % P, tag);
  }
  void wait() {
    ProfileScope time("mla/ring waits");
    recv.wait();
    send.wait();
  }
};

}  // namespace

void ring_attention_forward(const dist::Comm& cp, const RingShape& s, const float* q,
                            const float* latent, const ExpandKv& expand, float* out, float* lse) {
  K3_CHECK(s.documents.empty() || s.B == 1, "ring attention: packed documents need one row");
  const int P = cp.size(), r = cp.rank();
  const int64_t dq = s.d_n + s.d_r, n = s.rows() * s.latent();
  const kernels::AttentionShape cs = chunk_shape(s);
  Buf cur(latent, latent + n), next(static_cast<size_t>(n));
  Buf qs[2], acc[2], acc_lse[2];
  for (int slot = 0; slot < 2; ++slot) {
    qs[slot] = chunk_of(q, s, s.H * dq, slot);
    acc[slot].assign(static_cast<size_t>(s.B * s.C * s.H * s.d_v), 0.f);
    acc_lse[slot].assign(static_cast<size_t>(s.B * s.H * s.C),
                         -std::numeric_limits<float>::infinity());
  }
  Buf part(acc[0].size()), part_lse(acc_lse[0].size());
  for (int t = 0; t < P; ++t) {
    const int src = (r - t + P) % P;
    std::optional<RingStep> step;
    if (t + 1 < P) step.emplace(cp, cur.data(), next.data(), n, kLatentTag);
    const Keys keys(s, cur.data(), expand);
    for (int kslot = 0; kslot < 2; ++kslot)
      for (int qslot = 0; qslot < 2; ++qslot) {
        const int kc = chunk_id(src, kslot, P), qc = chunk_id(r, qslot, P);
        if (kc > qc) continue;
        const float *kn = keys.k_n[kslot].data(), *kr = keys.k_r[kslot].data(),
                    *v = keys.v[kslot].data();
        if (!s.documents.empty()) {
          forward_runs(s, qc, kc, qs[qslot].data(), kn, kr, v, acc[qslot].data(),
                       acc_lse[qslot].data());
          continue;
        }
        if (kc == qc)
          kernels::attention_forward(cs, qs[qslot].data(), kn, kr, v, part.data(), part_lse.data());
        else
          kernels::attention_block_forward(cs, s.C, s.C, qs[qslot].data(), kn, kr, v, part.data(),
                                           part_lse.data());
        kernels::attention_merge(s.B, s.C, s.H, s.d_v, acc[qslot].data(), acc_lse[qslot].data(),
                                 part.data(), part_lse.data());
      }
    if (step) {
      step->wait();
      std::swap(cur, next);
    }
  }
  std::fill(out, out + s.rows() * s.H * s.d_v, 0.f);
  for (int slot = 0; slot < 2; ++slot) {
    add_chunk(out, s, s.H * s.d_v, slot, acc[slot]);
    for (int64_t bh = 0; bh < s.B * s.H; ++bh)
      std::copy_n(acc_lse[slot].begin() + bh * s.C, s.C, lse + bh * 2 * s.C + slot * s.C);
  }
}

void ring_attention_backward(const dist::Comm& cp, const RingShape& s, const float* q,
                             const float* latent, const float* out, const float* lse,
                             const float* dout, const ExpandKv& expand,
                             const ExpandKvBackward& expand_backward, float* dq, float* dlatent) {
  K3_CHECK(s.documents.empty() || s.B == 1, "ring attention: packed documents need one row");
  const int P = cp.size(), r = cp.rank();
  const int64_t dqd = s.d_n + s.d_r, rows = s.rows(), n_lat = rows * s.latent();
  const kernels::AttentionShape cs = chunk_shape(s);
  Buf qs[2], os[2], ls[2], dos[2], dqs[2];
  for (int slot = 0; slot < 2; ++slot) {
    qs[slot] = chunk_of(q, s, s.H * dqd, slot);
    os[slot] = chunk_of(out, s, s.H * s.d_v, slot);
    ls[slot] = lse_chunk(lse, s, slot);
    dos[slot] = chunk_of(dout, s, s.H * s.d_v, slot);
    dqs[slot].assign(qs[slot].size(), 0.f);
  }
  // Two rings. The latent blocks travel as in the forward, each sent on while this step computes.
  // Each block's gradient follows one step behind: the partial sum of the block computed at step
  // t leaves after it, and the next rank, which computes that block at step t + 1, waits for it
  // only once its own share is done. After cp hops every block's gradient is home.
  Buf cur(latent, latent + n_lat), next(static_cast<size_t>(n_lat));
  Buf grad_in(static_cast<size_t>(n_lat)), grad_out(static_cast<size_t>(n_lat));
  std::optional<RingStep> grad_step;
  Buf tq(qs[0].size()), tk(static_cast<size_t>(s.B * s.C * s.H * s.d_n)),
      tkr(static_cast<size_t>(s.B * s.C * s.d_r)), tv(static_cast<size_t>(s.B * s.C * s.H * s.d_v));
  for (int t = 0; t < P; ++t) {
    const int src = (r - t + P) % P;
    std::optional<RingStep> latent_step;
    if (t + 1 < P) latent_step.emplace(cp, cur.data(), next.data(), n_lat, kLatentTag);
    const Keys keys(s, cur.data(), expand);
    Buf dkn(static_cast<size_t>(rows * s.H * s.d_n), 0.f),
        dv(static_cast<size_t>(rows * s.H * s.d_v), 0.f),
        dkr(static_cast<size_t>(rows * s.d_r), 0.f);
    for (int kslot = 0; kslot < 2; ++kslot) {
      Buf gk(tk.size(), 0.f), gkr(tkr.size(), 0.f), gv(tv.size(), 0.f);
      for (int qslot = 0; qslot < 2; ++qslot) {
        const int kc = chunk_id(src, kslot, P), qc = chunk_id(r, qslot, P);
        if (kc > qc) continue;
        const float *kn = keys.k_n[kslot].data(), *kr = keys.k_r[kslot].data(),
                    *v = keys.v[kslot].data();
        if (!s.documents.empty()) {
          backward_runs(s, qc, kc, qs[qslot].data(), kn, kr, v, os[qslot].data(), ls[qslot].data(),
                        dos[qslot].data(), dqs[qslot].data(), gk.data(), gkr.data(), gv.data());
          continue;
        }
        if (kc == qc) {  // the causal kernel writes its gradients: add them
          kernels::attention_backward(cs, qs[qslot].data(), kn, kr, v, os[qslot].data(),
                                      ls[qslot].data(), dos[qslot].data(), tq.data(), tk.data(),
                                      tkr.data(), tv.data());
          for (size_t i = 0; i < tq.size(); ++i) dqs[qslot][i] += tq[i];
          for (size_t i = 0; i < tk.size(); ++i) gk[i] += tk[i];
          for (size_t i = 0; i < tkr.size(); ++i) gkr[i] += tkr[i];
          for (size_t i = 0; i < tv.size(); ++i) gv[i] += tv[i];
        } else {
          kernels::attention_block_backward(cs, s.C, s.C, qs[qslot].data(), kn, kr, v,
                                            os[qslot].data(), ls[qslot].data(), dos[qslot].data(),
                                            dqs[qslot].data(), gk.data(), gkr.data(), gv.data());
        }
      }
      add_chunk(dkn.data(), s, s.H * s.d_n, kslot, gk);
      add_chunk(dkr.data(), s, s.d_r, kslot, gkr);
      add_chunk(dv.data(), s, s.H * s.d_v, kslot, gv);
    }
    // Into the block's latent gradient: c through kv_b_proj, k_r directly.
    Buf c(static_cast<size_t>(rows * s.r_kv)), dc(c.size(), 0.f);
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(cur.begin() + i * s.latent(), s.r_kv, c.begin() + i * s.r_kv);
    expand_backward(c.data(), dkn.data(), dv.data(), rows, dc.data());
    if (grad_step) grad_step->wait();  // this block's gradient from the ranks before
    for (int64_t i = 0; i < rows; ++i) {
      float* g = grad_out.data() + i * s.latent();
      const float* before = grad_in.data() + i * s.latent();
      for (int64_t j = 0; j < s.r_kv; ++j) g[j] = (t > 0 ? before[j] : 0.f) + dc[i * s.r_kv + j];
      for (int64_t j = 0; j < s.d_r; ++j)
        g[s.r_kv + j] = (t > 0 ? before[s.r_kv + j] : 0.f) + dkr[i * s.d_r + j];
    }
    grad_step.emplace(cp, grad_out.data(), grad_in.data(), n_lat, kGradientTag);
    if (latent_step) {
      latent_step->wait();
      std::swap(cur, next);
    }
  }
  grad_step->wait();  // the last hop brings this rank's own block home
  std::copy(grad_in.begin(), grad_in.end(), dlatent);
  std::fill(dq, dq + rows * s.H * dqd, 0.f);
  for (int slot = 0; slot < 2; ++slot) add_chunk(dq, s, s.H * dqd, slot, dqs[slot]);
}

}  // namespace k3::model
