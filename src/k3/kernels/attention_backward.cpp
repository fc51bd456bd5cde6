// Backward pass, race-free. Probabilities are recomputed per tile from the scores and the saved
// log-sum-exp, p = exp(s - lse) (computed as an exp2), and ds = scale * p * (dp - D) with
// dp = <dout_i, v_j> and D_i = <dout_i, out_i>. A key item (batch, head, key block) sums over the
// query blocks at or after its block to get dk, dv and this head's share of dkr (summed over heads
// afterwards, in head order). dq is summed over key blocks in ascending order, one of two ways:
//   fused: one item per (batch, head) runs its key items in order and also accumulates dq
//          (five products per tile), when the heads alone keep the threads evenly busy;
//   split: query items (batch, head, query block) recompute their tiles for dq (seven products
//          per tile, but many more items).
// Both make the same floating-point operations in the same order: results are bit-identical
// whichever way, and for any thread count.
#include <algorithm>

#include "k3/base/threads.h"
#include "k3/kernels/attention.h"
#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/fast_math.h"

namespace k3::kernels {
namespace {

using attn::Band;
using attn::kBlock;

struct BackwardArgs {
  const AttentionShape& s;
  float scale;
  const float *q, *k, *kr, *v, *lse, *dout;
  const float* delta;               // D [B, H, T]
  float *dq, *dk, *dkr_heads, *dv;  // dkr_heads [B, H, T, dr]: one share per head
  bool fused;
};

// Per-thread workspace: two transposed operands (in bf16 also rounded once, xr and yr), two
// score-sized tiles and the gradient rows accumulated for the item's block.
struct BackwardTile {
  float *xt, *yt, *p, *dp, *gx, *gy;
  uint32_t *xr, *yr;
  static size_t floats(const AttentionShape& s) {
    return static_cast<size_t>(kBlock * (2 * (s.dqk + s.dr) + 2 * s.dv + 2 * kBlock) +
                               attn::scores_rhs_words(s) + attn::rounded_words(s.dv, kBlock));
  }
  explicit BackwardTile(const AttentionShape& s) {
    const int64_t dqt = s.dqk + s.dr;
    xt = attn::thread_buffer(attn::Slot::Tile, floats(s));
    yt = xt + kBlock * dqt;
    p = yt + kBlock * s.dv;
    dp = p + kBlock * kBlock;
    gx = dp + kBlock * kBlock;
    gy = gx + kBlock * dqt;
    xr = reinterpret_cast<uint32_t*>(gy + kBlock * s.dv);
    yr = xr + attn::scores_rhs_words(s);
  }
};

// One tile row over columns [lo, hi) of n: p <- 2^(c * p - lse2), dp <- scale * p * (dp - D);
// zero outside. lse2(i) and delta(i) give the values of the query of column i; lse2 is the
// log-sum-exp in base 2 and c = scale * log2 e.
template <typename Lse2, typename Delta>
void gradient_row(float* p, float* dp, int64_t lo, int64_t hi, int64_t n, float scale, Lse2 lse2,
                  Delta delta) {
  const float c = scale * fast::kLog2e;
  std::fill(p, p + lo, 0.0f);
  std::fill(dp, dp + lo, 0.0f);
#pragma omp simd
  for (int64_t i = lo; i < hi; ++i) {
    const float pv = fast::exp2_nonpositive(p[i] * c - lse2(i));
    p[i] = pv;
    dp[i] = scale * pv * (dp[i] - delta(i));
  }
  std::fill(p + hi, p + n, 0.0f);
  std::fill(dp + hi, dp + n, 0.0f);
}

// dq rows [i0, i0 + nq) (+)= ds · [k_n | k_r] over the keys of one block; ds(i, j) at
// ds[j*kBlock + i] when ds_trans, else ds[i*kBlock + j].
void add_dq(const AttentionShape& s, const float* ds, bool ds_trans, int64_t nq, int64_t nk,
            const float* k_rows, int64_t ldk, const float* kr_rows, float* dq_rows, int64_t ldq,
            bool accumulate, int64_t i0_minus_j0) {
  const attn::Region region{Band::KLe, i0_minus_j0};
  attn::tile_gemm({nq, s.dqk, nk}, {ds, kBlock, ds_trans}, {k_rows, ldk},
                  {dq_rows, ldq, accumulate}, region, s.precision);
  if (s.dr > 0)
    attn::tile_gemm({nq, s.dr, nk}, {ds, kBlock, ds_trans}, {kr_rows, s.dr},
                    {dq_rows + s.dqk, ldq, accumulate}, region, s.precision);
}

// dk, dv and this head's dkr share of keys [j0, j0 + nk); in fused mode also the dq terms.
void key_block(const BackwardArgs& a, int64_t b, int64_t h, int64_t kb) {
  const AttentionShape& s = a.s;
  const attn::HeadRows hr = attn::head_rows(s, b, h);
  const int64_t dqt = s.dqk + s.dr, j0 = kb * kBlock, nk = std::min(kBlock, s.T - j0);
  BackwardTile w(s);
  float *kt = w.xt, *vt = w.yt, *dkk = w.gx, *dvv = w.gy;  // dkk [nk, dqt] = [dk | dkr share]
  const float* krows = a.k + hr.k + j0 * hr.ldk;
  const float* krrows = a.kr + hr.kr + j0 * s.dr;
  attn::transpose(nk, s.dqk, krows, hr.ldk, kt, kBlock);
  attn::transpose(nk, s.dr, krrows, s.dr, kt + s.dqk * kBlock, kBlock);
  attn::transpose(nk, s.dv, a.v + hr.v + j0 * hr.ldv, hr.ldv, vt, kBlock);
  const attn::ScoresRhs keys = attn::scores_rhs(s, kt, nk, w.xr);
  const attn::RoundedRhs vt_rounded = attn::round_rhs({vt, kBlock}, s.dv, nk, w.yr, s.precision);

  for (int64_t qb = kb; qb < attn::num_blocks(s.T); ++qb) {
    const int64_t i0 = qb * kBlock, nq = std::min(kBlock, s.T - i0);
    const float* qrows = a.q + hr.q + i0 * hr.ldq;
    const float* dorows = a.dout + hr.v + i0 * hr.ldv;
    // p[i][j] = <[q_n | q_r]_i, [k_n | k_r]_j> and dp[i][j] = <dout_i, v_j>, for keys j <= i.
    const attn::Region below{Band::ColLe, i0 - j0};
    attn::scores(s, nq, nk, {qrows, hr.ldq, false}, {qrows + s.dqk, hr.ldq, false}, keys, w.p,
                 below);
    attn::tile_gemm({nq, nk, s.dv}, {dorows, hr.ldv, false}, {vt, kBlock, &vt_rounded},
                    {w.dp, kBlock, false}, below, s.precision);
    for (int64_t i = 0; i < nq; ++i) {
      const float lse2 = a.lse[hr.lse + i0 + i] * fast::kLog2e, d = a.delta[hr.lse + i0 + i];
      gradient_row(
          w.p + i * kBlock, w.dp + i * kBlock, 0, qb == kb ? std::min(i + 1, nk) : nk, nk, a.scale,
          [=](int64_t) { return lse2; }, [=](int64_t) { return d; });
    }
    // Sums over queries i >= j: dv_j += p[i][j] dout_i, [dk | dkr]_j += ds[i][j] [q_n | q_r]_i.
    const attn::Region after{Band::KGe, j0 - i0};
    attn::tile_gemm({nk, s.dv, nq}, {w.p, kBlock, true}, {dorows, hr.ldv}, {dvv, s.dv, qb > kb},
                    after, s.precision);
    attn::tile_gemm({nk, dqt, nq}, {w.dp, kBlock, true}, {qrows, hr.ldq}, {dkk, dqt, qb > kb},
                    after, s.precision);
    if (a.fused)
      add_dq(s, w.dp, false, nq, nk, krows, hr.ldk, krrows, a.dq + hr.q + i0 * hr.ldq, hr.ldq,
             kb > 0, i0 - j0);
  }

  for (int64_t j = 0; j < nk; ++j) {
    const float* g = dkk + j * dqt;
    std::copy(g, g + s.dqk, a.dk + hr.k + (j0 + j) * hr.ldk);
    std::copy(g + s.dqk, g + dqt, a.dkr_heads + (hr.lse + j0 + j) * s.dr);
    std::copy(dvv + j * s.dv, dvv + (j + 1) * s.dv, a.dv + hr.v + (j0 + j) * hr.ldv);
  }
}

// Split mode: dq of queries [i0, i0 + nq), with tiles transposed (keys x queries) as in forward.
void query_block(const BackwardArgs& a, int64_t b, int64_t h, int64_t qb) {
  const AttentionShape& s = a.s;
  const attn::HeadRows hr = attn::head_rows(s, b, h);
  const int64_t dqt = s.dqk + s.dr, i0 = qb * kBlock, nq = std::min(kBlock, s.T - i0);
  BackwardTile w(s);
  float *qt = w.xt, *dot = w.yt, *dqq = w.gx;  // dqq [nq, dqt] = [dq_n | dq_r]
  attn::transpose(nq, dqt, a.q + hr.q + i0 * hr.ldq, hr.ldq, qt, kBlock);
  attn::transpose(nq, s.dv, a.dout + hr.v + i0 * hr.ldv, hr.ldv, dot, kBlock);
  const attn::ScoresRhs queries = attn::scores_rhs(s, qt, nq, w.xr);
  const attn::RoundedRhs dot_rounded = attn::round_rhs({dot, kBlock}, s.dv, nq, w.yr, s.precision);
  float lse2[kBlock];  // as key_block computes it, so that both modes round alike
  for (int64_t i = 0; i < nq; ++i) lse2[i] = a.lse[hr.lse + i0 + i] * fast::kLog2e;
  const float* delta = a.delta + hr.lse + i0;

  for (int64_t kb = 0; kb <= qb; ++kb) {
    const int64_t j0 = kb * kBlock, nk = std::min(kBlock, s.T - j0);
    const float* krows = a.k + hr.k + j0 * hr.ldk;
    const float* krrows = a.kr + hr.kr + j0 * s.dr;
    attn::scores(s, nk, nq, {krows, hr.ldk, false}, {krrows, s.dr, false}, queries, w.p,
                 {Band::ColGe, j0 - i0});
    attn::tile_gemm({nk, nq, s.dv}, {a.v + hr.v + j0 * hr.ldv, hr.ldv, false},
                    {dot, kBlock, &dot_rounded}, {w.dp, kBlock, false}, {Band::ColGe, j0 - i0},
                    s.precision);
    for (int64_t j = 0; j < nk; ++j)
      gradient_row(
          w.p + j * kBlock, w.dp + j * kBlock, kb == qb ? std::min(j, nq) : 0, nq, nq, a.scale,
          [&](int64_t i) { return lse2[i]; }, [=](int64_t i) { return delta[i]; });
    add_dq(s, w.dp, true, nq, nk, krows, hr.ldk, krrows, dqq, dqt, kb > 0, i0 - j0);
  }

  for (int64_t i = 0; i < nq; ++i)
    std::copy(dqq + i * dqt, dqq + (i + 1) * dqt, a.dq + hr.q + (i0 + i) * hr.ldq);
}

// Fused when one item per head keeps at least 80% of the threads busy.
bool use_fused(int64_t heads) {
  const int64_t n = num_threads(), rounds = (heads + n - 1) / n;
  return 5 * heads >= 4 * n * rounds;
}

}  // namespace

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* kr,
                        const float* v, const float* out, const float* lse, const float* dout,
                        float* dq, float* dk, float* dkr, float* dv) {
  attn::check_shape("attention_backward", s, kr);
  const int64_t heads = s.B * s.H, rows = heads * s.T, nb = attn::num_blocks(s.T);
  float* delta = attn::thread_buffer(attn::Slot::Call, static_cast<size_t>(rows * (1 + s.dr)));
  const BackwardArgs a{s,  s.effective_scale(), q, k, kr, v, lse, dout, delta, dq, dk, delta + rows,
                       dv, use_fused(heads)};

  // D in [B, H, T] order, from rows of [B, T, H].
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const float* o = out + row * s.dv;
    const float* g = dout + row * s.dv;
    float d = 0;
#pragma omp simd reduction(+ : d)
    for (int64_t c = 0; c < s.dv; ++c) d += o[c] * g[c];
    const int64_t b = row / (s.T * s.H), t = row / s.H % s.T, h = row % s.H;
    delta[(b * s.H + h) * s.T + t] = d;
  }

  if (a.fused) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < heads; ++bh)
      for (int64_t kb = 0; kb < nb; ++kb) key_block(a, bh / s.H, bh % s.H, kb);
  } else {
    // Heaviest first: a key item at block nb - w and a query item at block w - 1 span w tiles.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < 2 * nb * heads; ++item) {
      const int64_t w = nb - item / (2 * heads), bh = item % heads;
      if (item % (2 * heads) < heads)
        key_block(a, bh / s.H, bh % s.H, nb - w);
      else
        query_block(a, bh / s.H, bh % s.H, w - 1);
    }
  }

  if (s.dr == 0) return;
    // dkr[b, t] = sum over heads, in head order.
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < s.B * s.T; ++bt) {
    const int64_t b = bt / s.T, t = bt % s.T;
    float* dst = dkr + bt * s.dr;
    std::fill(dst, dst + s.dr, 0.0f);
    for (int64_t h = 0; h < s.H; ++h) {
      const float* src = a.dkr_heads + ((b * s.H + h) * s.T + t) * s.dr;
#pragma omp simd
      for (int64_t c = 0; c < s.dr; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace k3::kernels
