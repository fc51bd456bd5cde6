// Forward pass: one work item per (batch, head, query block). The item keeps its queries packed
// transposed and walks the key blocks up to the diagonal with an online softmax, computing each
// tile of scores transposed (keys x queries) so that the per-query max and sum run down columns.
#include "k3/kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"
#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/fast_math.h"

namespace k3::kernels {

float AttentionShape::effective_scale() const {
  return scale != 0 ? scale : 1.0f / std::sqrt(static_cast<float>(dqk + dr));
}

namespace attn {

void check_shape(const char* kernel, const AttentionShape& s, const float* kr) {
  K3_CHECK(s.B >= 0 && s.T >= 0 && s.H >= 1, kernel, ": bad shape B=", s.B, " T=", s.T, " H=", s.H);
  K3_CHECK(s.dqk >= 0 && s.dr >= 0 && s.dqk + s.dr >= 1 && s.dv >= 1, kernel,
           ": bad head dims dqk=", s.dqk, " dr=", s.dr, " dv=", s.dv);
  K3_CHECK((s.dr > 0) == (kr != nullptr), kernel,
           ": kr must be given exactly when dr > 0 (dr=", s.dr, ")");
  K3_CHECK(std::isfinite(s.effective_scale()), kernel, ": bad scale ", s.scale);
  K3_CHECK(s.causal, kernel, " is causal; full_attention.h attends both ways");
}

}  // namespace attn

namespace {

using attn::Band;
using attn::kBlock;

struct ForwardArgs {
  const AttentionShape& s;
  float scale;
  const float *q, *k, *kr, *v;
  float *out, *lse;
};

// Per-thread workspace of one query block; in bf16 its queries are rounded once (qt_rounded).
struct ForwardTile {
  float *qt, *st, *o, *m, *l, *alpha;
  uint32_t* qt_rounded;
  static size_t floats(const AttentionShape& s) {
    return static_cast<size_t>(kBlock * (s.dqk + s.dr) + kBlock * kBlock + kBlock * s.dv +
                               3 * kBlock + attn::scores_rhs_words(s));
  }
  explicit ForwardTile(const AttentionShape& s) {
    float* p = attn::thread_buffer(attn::Slot::Tile, floats(s));
    qt = p;
    st = qt + kBlock * (s.dqk + s.dr);
    o = st + kBlock * kBlock;
    m = o + kBlock * s.dv;
    l = m + kBlock;
    alpha = l + kBlock;
    qt_rounded = reinterpret_cast<uint32_t*>(alpha + kBlock);
  }
};

// Turns the raw scores st[j][i] of nk keys x nq queries into probabilities relative to the
// running max, updating m (max), l (sum) and alpha (rescale factor of earlier output); m is in
// base-2 units (scores times c = scale * log2 e). On the diagonal, row j only holds queries
// i >= j; the rest of the row is zeroed.
void online_softmax(float* st, int64_t nk, int64_t nq, bool diagonal, float c, float* m, float* l,
                    float* alpha) {
  float* mx = alpha;  // holds the new max until alpha is computed
  std::copy(m, m + nq, mx);
  for (int64_t j = 0; j < nk; ++j) {
    const float* row = st + j * kBlock;
#pragma omp simd
    for (int64_t i = diagonal ? j : 0; i < nq; ++i) {
      const float x = row[i] * c;  // by value: std::max returns a reference and does not vectorize
      mx[i] = x > mx[i] ? x : mx[i];
    }
  }
  float sum[kBlock] = {};
  for (int64_t j = 0; j < nk; ++j) {
    float* row = st + j * kBlock;
    const int64_t lo = diagonal ? std::min(j, nq) : 0;
    std::fill(row, row + lo, 0.0f);
#pragma omp simd
    for (int64_t i = lo; i < nq; ++i) {
      row[i] = fast::exp2_nonpositive(row[i] * c - mx[i]);
      sum[i] += row[i];
    }
  }
#pragma omp simd
  for (int64_t i = 0; i < nq; ++i) {
    const float a = fast::exp2_nonpositive(m[i] - mx[i]);  // ~0 on the first tile (m = -inf)
    m[i] = mx[i];
    l[i] = l[i] * a + sum[i];
    alpha[i] = a;
  }
}

void forward_block(const ForwardArgs& a, int64_t b, int64_t h, int64_t qb) {
  const AttentionShape& s = a.s;
  const attn::HeadRows hr = attn::head_rows(s, b, h);
  const int64_t dqt = s.dqk + s.dr, i0 = qb * kBlock, nq = std::min(kBlock, s.T - i0);
  ForwardTile w(s);
  attn::transpose(nq, dqt, a.q + hr.q + i0 * hr.ldq, hr.ldq, w.qt, kBlock);
  const attn::ScoresRhs qt = attn::scores_rhs(s, w.qt, nq, w.qt_rounded);
  std::fill(w.m, w.m + nq, -INFINITY);
  std::fill(w.l, w.l + nq, 0.0f);

  for (int64_t kb = 0; kb <= qb; ++kb) {
    const int64_t j0 = kb * kBlock, nk = std::min(kBlock, s.T - j0);
    attn::scores(s, nk, nq, {a.k + hr.k + j0 * hr.ldk, hr.ldk, false},
                 {a.kr + hr.kr + j0 * s.dr, s.dr, false}, qt, w.st, {Band::ColGe, j0 - i0});
    online_softmax(w.st, nk, nq, kb == qb, a.scale * fast::kLog2e, w.m, w.l, w.alpha);
    if (kb > 0)
      for (int64_t i = 0; i < nq; ++i)
#pragma omp simd
        for (int64_t c = 0; c < s.dv; ++c) w.o[i * s.dv + c] *= w.alpha[i];
    // o[i] += sum_j p[j][i] v_j over keys j <= i.
    attn::tile_gemm({nq, s.dv, nk}, {w.st, kBlock, true}, {a.v + hr.v + j0 * hr.ldv, hr.ldv},
                    {w.o, s.dv, kb > 0}, {Band::KLe, i0 - j0}, s.precision);
  }

  for (int64_t i = 0; i < nq; ++i) {
    const float inv = 1.0f / w.l[i];
    float* dst = a.out + hr.v + (i0 + i) * hr.ldv;
#pragma omp simd
    for (int64_t c = 0; c < s.dv; ++c) dst[c] = w.o[i * s.dv + c] * inv;
    a.lse[hr.lse + i0 + i] = (w.m[i] + std::log2(w.l[i])) * fast::kLn2;
  }
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* kr,
                       const float* v, float* out, float* lse) {
  attn::check_shape("attention_forward", s, kr);
  const ForwardArgs a{s, s.effective_scale(), q, k, kr, v, out, lse};
  const int64_t nb = attn::num_blocks(s.T), heads = s.B * s.H;
  // Longest items (last query blocks) first: causal work grows with the block index.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < nb * heads; ++item) {
    const int64_t qb = nb - 1 - item / heads, bh = item % heads;
    forward_block(a, bh / s.H, bh % s.H, qb);
  }
}

}  // namespace k3::kernels
