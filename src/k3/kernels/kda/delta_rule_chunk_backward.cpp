// Chunked backward: each group of heads (layout::HeadGroups) walks its chunks from the last, each
// chunk for every head of the group, reading a chunk's entry state S and products from its record,
// recomputing its elementwise factors, and carrying dS (the gradient w.r.t. the state leaving the
// chunk) back to the chunk before. With Y = Xᵀ dṼ and dR = Diag(β) Y:
//   dṼ  = Aqkᵀ dO + (e^{G_L−G}⊙K) dS         dV = dR
//   dAqk = dO Ṽᵀ (s ≤ r)                      dPkk = −Diag(β) Y Ṽᵀ (s < r)
//   d(Γ⊙Q) = dO Sᵀ,  d(Γ⊙K) = −dR Sᵀ,  d(e^{G_L−G}⊙K) = Ṽ dSᵀ
//   dS ← Diag(Γ_L) dS + (Γ⊙Q)ᵀ dO − (Γ⊙K)ᵀ dR
// Every G-dependence is a factor e^{±G}, so dG = q⊙dq + k⊙(dk_plus − dk_minus) plus the terms
// of G_L, and dg is the reverse cumulative sum of dG over the chunk.
#include <algorithm>

#include "k3/base/error.h"
#include "k3/base/threads.h"
#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/gemm.h"
#include "k3/kernels/kda/chunk_tiles.h"
#include "k3/kernels/kda/delta_rule_layout.h"

namespace k3::kernels::kda {
namespace {

using attn::Band;
using attn::tile_gemm;
using chunk::ChunkRows;
using chunk::kLd;

struct BackwardWork {
  // dS: the gradient w.r.t. the running state of each head of a group (K×V each).
  float *dS, *dvt, *z, *vtt, *dA, *ds, *dkbar, *dq, *dkp, *dkm, *dG_last;
  chunk::ChunkCore core;
  chunk::DecayPairs::GradScratch pair_scratch;
  BackwardWork(chunk::Carver& c, int64_t K, int64_t V, int64_t heads)
      : dS(c.take(heads * K * V)),
        dvt(c.take(kChunk * V)),
        z(c.take(3 * kChunk * V)),
        vtt(c.take(V * kLd)),
        dA(c.take(2 * kChunk * kLd)),
        ds(c.take(2 * kChunk * K)),
        dkbar(c.take(kChunk * K)),
        dq(c.take(kChunk * K)),
        dkp(c.take(kChunk * K)),
        dkm(c.take(kChunk * K)),
        dG_last(c.take(K)),
        core(c, K),
        pair_scratch(c, K) {}
};

// Where one chunk's gradients go: row r of dq is dq + r * ldqk.
struct ChunkGrads {
  float *dq, *dk, *dv, *dg, *dbeta;
};

ChunkGrads chunk_grads(const DeltaRuleGrads<float>& d, const layout::HeadRows& r, int64_t t0) {
  return {d.dq + r.qk + t0 * r.ldqk, d.dk + r.qk + t0 * r.ldqk, d.dv + r.v + t0 * r.ldv,
          d.dg + r.qk + t0 * r.ldqk, d.dbeta + r.beta + t0 * r.ldbeta};
}

// z = [Y; dO; −dR] (3L×V) from Y = Xᵀ dṼ; writes dv and the dβ of the values, Y · (V − (Γ⊙K) S).
void value_grads(const ChunkRows& x, const chunk::ChunkProducts& p, const float* dout,
                 BackwardWork& w, const ChunkGrads& d) {
  const int64_t L = x.L, V = x.V;
  // The transposed triangular solve: fp32, as in the forward.
  tile_gemm({L, V, L}, {p.X, kLd, true}, {w.dvt, V}, {w.z, V, false}, {Band::KGe, 0});
  for (int64_t r = 0; r < L; ++r) {
    const float *y = w.z + r * V, *res = p.r + r * V;
    const float* dor = dout + r * x.ldv;
    const float beta = x.b(r);
    float *dv = d.dv + r * x.ldv, *dO = w.z + (L + r) * V, *ndr = w.z + (2 * L + r) * V;
    float dbeta = 0;
#pragma omp simd reduction(+ : dbeta)
    for (int64_t j = 0; j < V; ++j) {
      dbeta += y[j] * res[j];
      dv[j] = beta * y[j];
      ndr[j] = -beta * y[j];
      dO[j] = dor[j];
    }
    d.dbeta[r * x.ldbeta] = dbeta;
  }
}

// dA = [Y Ṽᵀ; dO Ṽᵀ] becomes [dPkk; dAqk], masked to their triangles; adds the dβ of Pkk.
void pair_grads(const ChunkRows& x, const chunk::ChunkProducts& p, BackwardWork& w,
                const ChunkGrads& d) {
  const int64_t L = x.L, V = x.V;
  attn::transpose(L, V, p.vt, V, w.vtt, kLd);
  tile_gemm({L, L, V}, {w.z, V, false}, {w.vtt, kLd}, {w.dA, kLd, false}, {Band::ColLe, -1},
            x.precision);
  tile_gemm({L, L, V}, {w.z + L * V, V, false}, {w.vtt, kLd}, {w.dA + L * kLd, kLd, false},
            {Band::ColLe, 0}, x.precision);
  for (int64_t r = 0; r < L; ++r) {
    float *dP = w.dA + r * kLd, *dAqk = w.dA + (L + r) * kLd;
    const float* P = p.Pkk + r * kLd;
    const float beta = x.b(r);
    float dbeta = 0;
#pragma omp simd reduction(+ : dbeta)
    for (int64_t s = 0; s < r; ++s) {
      dbeta -= dP[s] * P[s];
      dP[s] *= -beta;
    }
    d.dbeta[r * x.ldbeta] += dbeta;
    std::fill(dP + r, dP + L, 0.0f);
    std::fill(dAqk + r + 1, dAqk + L, 0.0f);
  }
}

// One chunk with entry state S and products p: dS (K×V) holds the gradient w.r.t. the state
// leaving the chunk on entry and w.r.t. S on exit.
void backward_chunk(const ChunkRows& x, const float* S, const chunk::ChunkProducts& p,
                    const float* dout, float* dS, BackwardWork& w, const ChunkGrads& d) {
  const int64_t L = x.L, K = x.K, V = x.V;
  chunk::ChunkCore& core = w.core;
  core.factors(x);

  gemm(false, false, L, V, K, 1.0f, core.kbar, dS, 0.0f, w.dvt, x.precision);
  tile_gemm({L, V, L}, {p.Aqk, kLd, true}, {dout, x.ldv}, {w.dvt, V, true}, {Band::KGe, 0},
            x.precision);
  value_grads(x, p, dout, w, d);
  pair_grads(x, p, w, d);
  // ds = [dO; −dR] Sᵀ, dkbar = Ṽ dSᵀ.
  gemm(false, true, 2 * L, K, V, 1.0f, w.z + L * V, S, 0.0f, w.ds, x.precision);
  gemm(false, true, L, K, V, 1.0f, p.vt, dS, 0.0f, w.dkbar, x.precision);

  // G_L's terms, then dS ← Diag(Γ_L) dS + [Γ⊙Q; Γ⊙K]ᵀ [dO; −dR].
  std::fill(w.dG_last, w.dG_last + K, 0.0f);
  for (int64_t r = 0; r < L; ++r) {
    const float *kb = core.kbar + r * K, *dkb = w.dkbar + r * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) w.dG_last[c] += kb[c] * dkb[c];
  }
  for (int64_t c = 0; c < K; ++c) {
    const float decay = core.gamma[(L - 1) * K + c];
    const float* Sc = S + c * V;
    float* dSc = dS + c * V;
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t j = 0; j < V; ++j) {
      acc += Sc[j] * dSc[j];
      dSc[j] *= decay;
    }
    w.dG_last[c] += decay * acc;
  }
  gemm(true, false, K, V, 2 * L, 1.0f, core.gq, w.z + L * V, 1.0f, dS, x.precision);

  for (int64_t r = 0; r < L; ++r) {
    const float *gamma = core.gamma + r * K, *ex = core.exit + r * K, *dkb = w.dkbar + r * K;
    const float *dsq = w.ds + r * K, *dsk = w.ds + (L + r) * K;
    float *dq = w.dq + r * K, *dkp = w.dkp + r * K, *dkm = w.dkm + r * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) {
      dq[c] = gamma[c] * dsq[c];
      dkp[c] = gamma[c] * dsk[c];
      dkm[c] = ex[c] * dkb[c];
    }
  }
  core.pairs.backward(w.dA + L * kLd, w.dA, w.dq, w.dkp, w.dkm, w.pair_scratch);

  // dg[r] = Σ_{r' ≥ r} dG[r'], written from the last row up.
  for (int64_t r = L - 1; r >= 0; --r) {
    const float *q = x.q + r * x.ldqk, *k = x.k + r * x.ldqk;
    const float *dq = w.dq + r * K, *dkp = w.dkp + r * K, *dkm = w.dkm + r * K;
    float *dqo = d.dq + r * x.ldqk, *dko = d.dk + r * x.ldqk, *dgo = d.dg + r * x.ldqk;
    float* acc = w.dG_last;  // running sum, starting from G_L's own terms
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) {
      acc[c] += q[c] * dq[c] + k[c] * (dkp[c] - dkm[c]);
      dgo[c] = acc[c];
      dqo[c] = dq[c];
      dko[c] = dkp[c] + dkm[c];
    }
  }
}

}  // namespace

void chunk_backward(const DeltaRuleShape& s, const DeltaRuleInputs<float>& in,
                    const float* chunk_saved, const float* dout, const float* dfinal_state,
                    const DeltaRuleGrads<float>& grads) {
  layout::check_shape("kda chunk_backward", s);
  layout::check_pointers("kda chunk_backward", s, in.q, in.k, in.v, in.g, in.beta);
  layout::check_pointers("kda chunk_backward", s, grads.dq, grads.dk, grads.dv, grads.dg,
                         grads.dbeta);
  K3_CHECK(s.B * s.T == 0 || (chunk_saved && dout),
           "kda chunk_backward: chunk_saved and dout are required");
  const int64_t KV = s.K * s.V;
  const std::vector<int64_t> first_chunk = layout::first_chunks(s);
  const layout::HeadGroups groups = layout::head_groups(s, num_threads());
#pragma omp parallel
  {
    auto work = chunk::thread_work<BackwardWork>(s.K, s.V, groups.size);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < groups.count; ++item) {
      const int64_t first = groups.first(s, item), last = groups.last(s, item);
      auto dS = [&](int64_t i) { return work.dS + (i - first) * KV; };
      for (int64_t i = first; i < last; ++i) {
        const int64_t state = layout::head_rows(s, i).state;
        if (dfinal_state)
          std::copy(dfinal_state + state, dfinal_state + state + KV, dS(i));
        else
          std::fill(dS(i), dS(i) + KV, 0.0f);
      }
      for (int64_t j = layout::num_chunks(layout::head_rows(s, first).length) - 1; j >= 0; --j)
        for (int64_t i = first; i < last; ++i) {
          const layout::HeadRows r = layout::head_rows(s, i);
          const int64_t t0 = j * kChunk;
          // The record is read-only here; ChunkProducts holds mutable pointers for the forward.
          float* record =
              const_cast<float*>(chunk_saved) + layout::chunk_record(s, first_chunk, i, j);
          backward_chunk(chunk::chunk_rows(s, in, r, t0), record,
                         chunk::ChunkProducts::at(record + KV, s.V), dout + r.v + t0 * r.ldv, dS(i),
                         work, chunk_grads(grads, r, t0));
        }
      if (grads.dinitial_state)
        for (int64_t i = first; i < last; ++i)
          std::copy(dS(i), dS(i) + KV, grads.dinitial_state + layout::head_rows(s, i).state);
    }
  }
}

}  // namespace k3::kernels::kda
