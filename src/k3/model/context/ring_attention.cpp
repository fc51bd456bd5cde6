#include "k3/model/context/ring_attention.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/kernels/attention.h"
#include "k3/kernels/attention_block.h"
#include "k3/model/context/documents.h"
#include "k3/model/context/scratch.h"

namespace k3::model {
namespace {

constexpr int kLatentTag = 72, kGradientTag = 73;

// Chunk `slot` (0 or 1) of rows laid out [B, 2C, width], as [B, C, width]; and back (adding).
float* chunk_of(Arena& scratch, const float* x, const RingShape& s, int64_t width, int slot) {
  float* out = scratch_floats(scratch, s.B * s.C * width);
  for (int64_t b = 0; b < s.B; ++b)
    std::copy_n(x + (b * 2 * s.C + slot * s.C) * width, s.C * width, out + b * s.C * width);
  return out;
}
void add_chunk(float* x, const RingShape& s, int64_t width, int slot, const float* part) {
  for (int64_t b = 0; b < s.B; ++b) {
    float* at = x + (b * 2 * s.C + slot * s.C) * width;
    const float* from = part + b * s.C * width;
    for (int64_t i = 0; i < s.C * width; ++i) at[i] += from[i];
  }
}
// lse [B, H, 2C] and its chunk [B, H, C].
float* lse_chunk(Arena& scratch, const float* lse, const RingShape& s, int slot) {
  float* out = scratch_floats(scratch, s.B * s.H * s.C);
  for (int64_t bh = 0; bh < s.B * s.H; ++bh)
    std::copy_n(lse + bh * 2 * s.C + slot * s.C, s.C, out + bh * s.C);
  return out;
}

// The global chunk in slot `slot` of rank `rank`.
int chunk_id(int rank, int slot, int ranks) { return slot == 0 ? rank : 2 * ranks - 1 - rank; }

// One held block, expanded: per slot, k_n, k_r and v of its chunk (in `scratch`).
struct Keys {
  const float *k_n[2], *k_r[2], *v[2];
  Keys(Arena& scratch, const RingShape& s, const float* latent, const ExpandKv& expand) {
    const int64_t rows = s.rows();
    float *c = scratch_floats(scratch, rows * s.r_kv), *kr = scratch_floats(scratch, rows * s.d_r);
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(latent + i * s.latent(), s.r_kv, c + i * s.r_kv);
      std::copy_n(latent + i * s.latent() + s.r_kv, s.d_r, kr + i * s.d_r);
    }
    float* kn = scratch_floats(scratch, rows * s.H * s.d_n);
    float* vv = scratch_floats(scratch, rows * s.H * s.d_v);
    expand(c, rows, kn, vv);
    for (int slot = 0; slot < 2; ++slot) {
      k_n[slot] = chunk_of(scratch, kn, s, s.H * s.d_n, slot);
      k_r[slot] = chunk_of(scratch, kr, s, s.d_r, slot);
      v[slot] = chunk_of(scratch, vv, s, s.H * s.d_v, slot);
    }
  }
};

kernels::AttentionShape chunk_shape(const RingShape& s) {
  kernels::AttentionShape cs{s.B, s.C, s.H, s.d_n, s.d_r, s.d_v, 0.f};
  cs.precision = s.precision;
  return cs;
}

// The first key of chunk kc (of C tokens) that a run of query chunk qc sees: on the diagonal the
// run's own first row, in an earlier chunk its document's start (C or more: none).
int64_t first_key(const DocumentRun& run, int qc, int kc, int64_t C) {
  return kc == qc ? run.begin : std::max<int64_t>(run.start - kc * C, 0);
}

// Query chunk qc against key chunk kc over packed documents, run by run, merged into acc and
// acc_lse ([C, H, d_v] and [H, C]).
void forward_runs(Arena& scratch, const RingShape& s, int qc, int kc, const float* q,
                  const float* kn, const float* kr, const float* v, float* acc, float* acc_lse) {
  const int64_t C = s.C, H = s.H, dq = s.d_n + s.d_r;
  for (const DocumentRun& run : document_runs(s.documents, qc * C, C)) {
    const int64_t n = run.end - run.begin, k0 = first_key(run, qc, kc, C);
    if (k0 >= C) continue;
    kernels::AttentionShape cs{1, n, H, s.d_n, s.d_r, s.d_v, 0.f};
    cs.precision = s.precision;
    const float *qr = q + run.begin * H * dq, *knr = kn + k0 * H * s.d_n, *krr = kr + k0 * s.d_r,
                *vr = v + k0 * H * s.d_v;
    ArenaScope scope(scratch);
    float *out = scratch_floats(scratch, n * H * s.d_v), *lse = scratch_floats(scratch, H * n);
    if (kc == qc)
      kernels::attention_forward(cs, qr, knr, krr, vr, out, lse);
    else
      kernels::attention_block_forward(cs, n, C - k0, qr, knr, krr, vr, out, lse);
    float* merged = scratch_floats(scratch, H * n);
    run_lse(acc_lse, H, C, run, merged);
    kernels::attention_merge(1, n, H, s.d_v, acc + run.begin * H * s.d_v, merged, out, lse);
    put_run_lse(acc_lse, H, C, run, merged);
  }
}

// Its backward: accumulates dq ([C, H, d_n + d_r]) and the key chunk's gk, gkr, gv.
void backward_runs(Arena& scratch, const RingShape& s, int qc, int kc, const float* q,
                   const float* kn, const float* kr, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* gk, float* gkr,
                   float* gv) {
  const int64_t C = s.C, H = s.H, dqd = s.d_n + s.d_r;
  for (const DocumentRun& run : document_runs(s.documents, qc * C, C)) {
    const int64_t n = run.end - run.begin, k0 = first_key(run, qc, kc, C);
    if (k0 >= C) continue;
    kernels::AttentionShape cs{1, n, H, s.d_n, s.d_r, s.d_v, 0.f};
    cs.precision = s.precision;
    const int64_t qo = run.begin * H * dqd, oo = run.begin * H * s.d_v;
    const int64_t ko = k0 * H * s.d_n, kro = k0 * s.d_r, vo = k0 * H * s.d_v;
    ArenaScope scope(scratch);
    float* l = scratch_floats(scratch, H * n);
    run_lse(lse, H, C, run, l);
    if (kc != qc) {
      kernels::attention_block_backward(cs, n, C - k0, q + qo, kn + ko, kr + kro, v + vo, out + oo,
                                        l, dout + oo, dq + qo, gk + ko, gkr + kro, gv + vo);
      continue;
    }
    const int64_t nq = n * H * dqd, nk = n * H * s.d_n, nkr = n * s.d_r, nv = n * H * s.d_v;
    float *tq = scratch_floats(scratch, nq), *tk = scratch_floats(scratch, nk),
          *tkr = scratch_floats(scratch, nkr), *tv = scratch_floats(scratch, nv);
    kernels::attention_backward(cs, q + qo, kn + ko, kr + kro, v + vo, out + oo, l, dout + oo, tq,
                                tk, tkr, tv);
    for (int64_t i = 0; i < nq; ++i) dq[qo + i] += tq[i];
    for (int64_t i = 0; i < nk; ++i) gk[ko + i] += tk[i];
    for (int64_t i = 0; i < nkr; ++i) gkr[kro + i] += tkr[i];
    for (int64_t i = 0; i < nv; ++i) gv[vo + i] += tv[i];
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
    ProfileScope time("ring waits");
    recv.wait();
    send.wait();
  }
};

}  // namespace

void ring_attention_forward(Arena& scratch, const dist::Comm& cp, const RingShape& s,
                            const float* q, const float* latent, const ExpandKv& expand, float* out,
                            float* lse) {
  K3_CHECK(s.documents.empty() || s.B == 1, "ring attention: packed documents need one row");
  ArenaScope scope(scratch);
  const int P = cp.size(), r = cp.rank();
  const int64_t dq = s.d_n + s.d_r, n = s.rows() * s.latent();
  const int64_t n_acc = s.B * s.C * s.H * s.d_v, n_lse = s.B * s.H * s.C;
  const kernels::AttentionShape cs = chunk_shape(s);
  float *cur = scratch_floats(scratch, n), *next = scratch_floats(scratch, n);
  std::copy_n(latent, n, cur);
  float *qs[2], *acc[2], *acc_lse[2];
  for (int slot = 0; slot < 2; ++slot) {
    qs[slot] = chunk_of(scratch, q, s, s.H * dq, slot);
    acc[slot] = scratch_filled(scratch, n_acc);
    acc_lse[slot] = scratch_filled(scratch, n_lse, -std::numeric_limits<float>::infinity());
  }
  float *part = scratch_floats(scratch, n_acc), *part_lse = scratch_floats(scratch, n_lse);
  for (int t = 0; t < P; ++t) {
    const int src = (r - t + P) % P;
    std::optional<RingStep> step;
    if (t + 1 < P) step.emplace(cp, cur, next, n, kLatentTag);
    ArenaScope block(scratch);
    const Keys keys(scratch, s, cur, expand);
    for (int kslot = 0; kslot < 2; ++kslot)
      for (int qslot = 0; qslot < 2; ++qslot) {
        const int kc = chunk_id(src, kslot, P), qc = chunk_id(r, qslot, P);
        if (kc > qc) continue;
        const float *kn = keys.k_n[kslot], *kr = keys.k_r[kslot], *v = keys.v[kslot];
        if (!s.documents.empty()) {
          forward_runs(scratch, s, qc, kc, qs[qslot], kn, kr, v, acc[qslot], acc_lse[qslot]);
          continue;
        }
        if (kc == qc)
          kernels::attention_forward(cs, qs[qslot], kn, kr, v, part, part_lse);
        else
          kernels::attention_block_forward(cs, s.C, s.C, qs[qslot], kn, kr, v, part, part_lse);
        kernels::attention_merge(s.B, s.C, s.H, s.d_v, acc[qslot], acc_lse[qslot], part, part_lse);
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
      std::copy_n(acc_lse[slot] + bh * s.C, s.C, lse + bh * 2 * s.C + slot * s.C);
  }
}

void ring_attention_backward(Arena& scratch, const dist::Comm& cp, const RingShape& s,
                             const float* q, const float* latent, const float* out,
                             const float* lse, const float* dout, const ExpandKv& expand,
                             const ExpandKvBackward& expand_backward, float* dq, float* dlatent) {
  K3_CHECK(s.documents.empty() || s.B == 1, "ring attention: packed documents need one row");
  ArenaScope scope(scratch);
  const int P = cp.size(), r = cp.rank();
  const int64_t dqd = s.d_n + s.d_r, rows = s.rows(), n_lat = rows * s.latent();
  const kernels::AttentionShape cs = chunk_shape(s);
  const int64_t nq = s.B * s.C * s.H * dqd, nk = s.B * s.C * s.H * s.d_n, nkr = s.B * s.C * s.d_r,
                nv = s.B * s.C * s.H * s.d_v;
  const float *qs[2], *os[2], *ls[2], *dos[2];
  float* dqs[2];
  for (int slot = 0; slot < 2; ++slot) {
    qs[slot] = chunk_of(scratch, q, s, s.H * dqd, slot);
    os[slot] = chunk_of(scratch, out, s, s.H * s.d_v, slot);
    ls[slot] = lse_chunk(scratch, lse, s, slot);
    dos[slot] = chunk_of(scratch, dout, s, s.H * s.d_v, slot);
    dqs[slot] = scratch_filled(scratch, nq);
  }
  // Two rings. The latent blocks travel as in the forward, each sent on while this step computes.
  // Each block's gradient follows one step behind: the partial sum of the block computed at step
  // t leaves after it, and the next rank, which computes that block at step t + 1, waits for it
  // only once its own share is done. After cp hops every block's gradient is home.
  float *cur = scratch_floats(scratch, n_lat), *next = scratch_floats(scratch, n_lat);
  std::copy_n(latent, n_lat, cur);
  float *grad_in = scratch_floats(scratch, n_lat), *grad_out = scratch_floats(scratch, n_lat);
  std::optional<RingStep> grad_step;
  float *tq = scratch_floats(scratch, nq), *tk = scratch_floats(scratch, nk),
        *tkr = scratch_floats(scratch, nkr), *tv = scratch_floats(scratch, nv);
  for (int t = 0; t < P; ++t) {
    const int src = (r - t + P) % P;
    std::optional<RingStep> latent_step;
    if (t + 1 < P) latent_step.emplace(cp, cur, next, n_lat, kLatentTag);
    ArenaScope block(scratch);
    const Keys keys(scratch, s, cur, expand);
    float* dkn = scratch_filled(scratch, rows * s.H * s.d_n);
    float* dv = scratch_filled(scratch, rows * s.H * s.d_v);
    float* dkr = scratch_filled(scratch, rows * s.d_r);
    for (int kslot = 0; kslot < 2; ++kslot) {
      ArenaScope chunk(scratch);
      float *gk = scratch_filled(scratch, nk), *gkr = scratch_filled(scratch, nkr),
            *gv = scratch_filled(scratch, nv);
      for (int qslot = 0; qslot < 2; ++qslot) {
        const int kc = chunk_id(src, kslot, P), qc = chunk_id(r, qslot, P);
        if (kc > qc) continue;
        const float *kn = keys.k_n[kslot], *kr = keys.k_r[kslot], *v = keys.v[kslot];
        if (!s.documents.empty()) {
          backward_runs(scratch, s, qc, kc, qs[qslot], kn, kr, v, os[qslot], ls[qslot], dos[qslot],
                        dqs[qslot], gk, gkr, gv);
          continue;
        }
        if (kc == qc) {  // the causal kernel writes its gradients: add them
          kernels::attention_backward(cs, qs[qslot], kn, kr, v, os[qslot], ls[qslot], dos[qslot],
                                      tq, tk, tkr, tv);
          for (int64_t i = 0; i < nq; ++i) dqs[qslot][i] += tq[i];
          for (int64_t i = 0; i < nk; ++i) gk[i] += tk[i];
          for (int64_t i = 0; i < nkr; ++i) gkr[i] += tkr[i];
          for (int64_t i = 0; i < nv; ++i) gv[i] += tv[i];
        } else {
          kernels::attention_block_backward(cs, s.C, s.C, qs[qslot], kn, kr, v, os[qslot],
                                            ls[qslot], dos[qslot], dqs[qslot], gk, gkr, gv);
        }
      }
      add_chunk(dkn, s, s.H * s.d_n, kslot, gk);
      add_chunk(dkr, s, s.d_r, kslot, gkr);
      add_chunk(dv, s, s.H * s.d_v, kslot, gv);
    }
    // Into the block's latent gradient: c through kv_b_proj, k_r directly.
    float *c = scratch_floats(scratch, rows * s.r_kv), *dc = scratch_filled(scratch, rows * s.r_kv);
    for (int64_t i = 0; i < rows; ++i) std::copy_n(cur + i * s.latent(), s.r_kv, c + i * s.r_kv);
    expand_backward(c, dkn, dv, rows, dc);
    if (grad_step) grad_step->wait();  // this block's gradient from the ranks before
    for (int64_t i = 0; i < rows; ++i) {
      float* g = grad_out + i * s.latent();
      const float* before = grad_in + i * s.latent();
      for (int64_t j = 0; j < s.r_kv; ++j) g[j] = (t > 0 ? before[j] : 0.f) + dc[i * s.r_kv + j];
      for (int64_t j = 0; j < s.d_r; ++j)
        g[s.r_kv + j] = (t > 0 ? before[s.r_kv + j] : 0.f) + dkr[i * s.d_r + j];
    }
    grad_step.emplace(cp, grad_out, grad_in, n_lat, kGradientTag);
    if (latent_step) {
      latent_step->wait();
      std::swap(cur, next);
    }
  }
  grad_step->wait();  // the last hop brings this rank's own block home
  std::copy_n(grad_in, n_lat, dlatent);
  std::fill(dq, dq + rows * s.H * dqd, 0.f);
  for (int slot = 0; slot < 2; ++slot) add_chunk(dq, s, s.H * dqd, slot, dqs[slot]);
}

}  // namespace k3::model
