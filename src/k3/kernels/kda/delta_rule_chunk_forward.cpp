// Chunked forward (math §3, "Chunkwise form"), per chunk with entry state S:
//   Ṽ = (I + Diag(β) Pkk)⁻¹ Diag(β) (V − (Γ⊙K) S)     (= U − W S of the WY form)
//   O = (Γ⊙Q) S + Aqk Ṽ
//   S ← Diag(Γ_L) S + (e^{G_L − G} ⊙ K)ᵀ Ṽ
// One work item per group of heads of a sequence (layout::HeadGroups) walks its chunks in order,
// each chunk for every head of the group; the state entering each chunk and the chunk's products
// are kept in place in the chunk's record of chunk_saved.
#include <algorithm>

#include "k3/base/threads.h"
#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/gemm.h"
#include "k3/kernels/kda/chunk_tiles.h"
#include "k3/kernels/kda/delta_rule_layout.h"

namespace k3::kernels::kda {
namespace {

using chunk::ChunkRows;
using chunk::kLd;

struct ForwardWork {
  float* S;  // the running state of each head of a group, when neither saved nor returned
  chunk::ChunkCore core;
  float* vb;                 // Diag(β) r (L×V)
  chunk::ChunkProducts own;  // where the products go when the forward saves nothing
  ForwardWork(chunk::Carver& c, int64_t K, int64_t V, int64_t heads)
      : S(c.take(heads * K * V)),
        core(c, K),
        vb(c.take(kChunk * V)),
        own(chunk::ChunkProducts::at(c.take(chunk::ChunkProducts::floats(V)), V)) {}
};

// The chunk's factors (w.core), then its products (chunk_tiles.h) from entry state S into p.
void chunk_products(const ChunkRows& x, const float* S, const chunk::ChunkProducts& p,
                    ForwardWork& w) {
  const int64_t L = x.L, K = x.K, V = x.V;
  chunk::ChunkCore& core = w.core;
  core.factors(x);
  gemm(false, false, L, V, K, 1.0f, core.gq + L * K, S, 0.0f, p.r, x.precision);  // (Γ⊙K) S
  core.pairs.products(p.Aqk, p.Pkk);
  chunk::invert_unit_lower(x, p.Pkk, p.X);
  for (int64_t r = 0; r < L; ++r) {
    const float* v = x.v + r * x.ldv;
    const float beta = x.b(r);
    float *rr = p.r + r * V, *vbr = w.vb + r * V;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) {
      rr[j] = v[j] - rr[j];
      vbr[j] = beta * rr[j];
    }
  }
  // Applying the WY inverse is the triangular solve: fp32 (docs/precision.md).
  attn::tile_gemm({L, V, L}, {p.X, kLd, false}, {w.vb, V}, {p.vt, V, false}, {attn::Band::KLe, 0});
}

// One chunk from entry state S: writes its outputs (row stride x.ldv), its products to p and the
// state leaving it to next (which may be S).
void forward_chunk(const ChunkRows& x, const float* S, float* next, float* out,
                   const chunk::ChunkProducts& p, ForwardWork& w) {
  const int64_t L = x.L, K = x.K, V = x.V;
  const chunk::ChunkCore& core = w.core;
  chunk_products(x, S, p, w);
  gemm({false, false, L, V, K, 1.0f, core.gq, K, S, V, 0.0f, out, x.ldv, x.precision});  // (Γ⊙Q) S
  attn::tile_gemm({L, V, L}, {p.Aqk, kLd, false}, {p.vt, V}, {out, x.ldv, true},
                  {attn::Band::KLe, 0}, x.precision);

  const float* decay = core.gamma + (L - 1) * K;
  for (int64_t c = 0; c < K; ++c) {
    const float* row = S + c * V;
    float* dst = next + c * V;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) dst[j] = decay[c] * row[j];
  }
  gemm(true, false, K, V, L, 1.0f, core.kbar, p.vt, 1.0f, next, x.precision);
}

}  // namespace

void chunk_forward(const DeltaRuleShape& s, const DeltaRuleInputs<float>& in, float* out,
                   float* final_state, float* chunk_saved) {
  layout::check_shape("kda chunk_forward", s);
  layout::check_pointers("kda chunk_forward", s, in.q, in.k, in.v, in.g, in.beta);
  const int64_t KV = s.K * s.V;
  const std::vector<int64_t> first_chunk = layout::first_chunks(s);
  const layout::HeadGroups groups = layout::head_groups(s, num_threads());
#pragma omp parallel
  {
    auto work = chunk::thread_work<ForwardWork>(s.K, s.V, groups.size);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < groups.count; ++item) {
      const int64_t first = groups.first(s, item), last = groups.last(s, item);
      const int64_t chunks = layout::num_chunks(layout::head_rows(s, first).length);
      // Where head i's state is on entering chunk j (j = chunks: the state the head ends with).
      auto state = [&](int64_t i, int64_t j) {
        if (chunk_saved && j < chunks)
          return chunk_saved + layout::chunk_record(s, first_chunk, i, j);
        return final_state ? final_state + layout::head_rows(s, i).state
                           : work.S + (i - first) * KV;
      };
      for (int64_t i = first; i < last; ++i) {
        float* S = state(i, 0);
        const float* init =
            in.initial_state ? in.initial_state + layout::head_rows(s, i).state : nullptr;
        if (!init)
          std::fill(S, S + KV, 0.0f);
        else if (init != S)  // final_state may be the initial_state buffer
          std::copy(init, init + KV, S);
      }
      for (int64_t j = 0; j < chunks; ++j)
        for (int64_t i = first; i < last; ++i) {
          const layout::HeadRows r = layout::head_rows(s, i);
          const int64_t t0 = j * kChunk;
          float* S = state(i, j);
          const chunk::ChunkProducts products =
              chunk_saved ? chunk::ChunkProducts::at(S + KV, s.V) : work.own;
          forward_chunk(chunk::chunk_rows(s, in, r, t0), S, state(i, j + 1), out + r.v + t0 * r.ldv,
                        products, work);
        }
    }
  }
}

}  // namespace k3::kernels::kda
