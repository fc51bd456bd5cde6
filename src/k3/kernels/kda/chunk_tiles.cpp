#include "k3/kernels/kda/chunk_tiles.h"

#include <immintrin.h>

#include <cstdlib>
#include <memory>
#include <new>

#include "k3/kernels/attention_tiles.h"
#include "k3/kernels/fast_math.h"
#include "k3/kernels/gemm.h"

namespace k3::kernels::kda::chunk {

using attn::Band;
using attn::tile_gemm;

float* thread_scratch(size_t n) {
  struct Buffer {
    std::unique_ptr<float[], decltype(&std::free)> data{nullptr, &std::free};
    size_t size = 0;
  };
  thread_local Buffer buffer;
  if (buffer.size < n) {
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    buffer.data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!buffer.data) throw std::bad_alloc();
    buffer.size = n;
  }
  return buffer.data.get();
}

namespace {

// A 16×16 block in registers: interleave pairs of rows, then pairs of pairs, then 128-bit lanes.
// (The maskz forms compute the same and keep GCC 12 from warning about its own headers.)
void transpose_16x16(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(0xFFFF, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(0xFFFF, r[i], r[i + 1]);
  }
  auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpacklo_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpackhi_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  // r[4g + m], lane l: column m + 4l of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    r[g] = lo(t[g], t[g + 2]);
    r[g + 1] = hi(t[g], t[g + 2]);
    r[g + 2] = lo(t[g + 1], t[g + 3]);
    r[g + 3] = hi(t[g + 1], t[g + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 w0 = _mm512_maskz_shuffle_f32x4(0xFFFF, r[m], r[4 + m], 0x44);
    const __m512 w1 = _mm512_maskz_shuffle_f32x4(0xFFFF, r[m], r[4 + m], 0xEE);
    const __m512 w2 = _mm512_maskz_shuffle_f32x4(0xFFFF, r[8 + m], r[12 + m], 0x44);
    const __m512 w3 = _mm512_maskz_shuffle_f32x4(0xFFFF, r[8 + m], r[12 + m], 0xEE);
    _mm512_storeu_ps(dst + m * ld_dst, _mm512_maskz_shuffle_f32x4(0xFFFF, w0, w2, 0x88));
    _mm512_storeu_ps(dst + (m + 4) * ld_dst, _mm512_maskz_shuffle_f32x4(0xFFFF, w0, w2, 0xDD));
    _mm512_storeu_ps(dst + (m + 8) * ld_dst, _mm512_maskz_shuffle_f32x4(0xFFFF, w1, w3, 0x88));
    _mm512_storeu_ps(dst + (m + 12) * ld_dst, _mm512_maskz_shuffle_f32x4(0xFFFF, w1, w3, 0xDD));
  }
}

}  // namespace

void transpose(int64_t rows, int64_t cols, const float* src, int64_t ld_src, float* dst,
               int64_t ld_dst) {
  const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
  for (int64_t r = 0; r < full_rows; r += 16)
    for (int64_t c = 0; c < full_cols; c += 16)
      transpose_16x16(src + r * ld_src + c, ld_src, dst + c * ld_dst + r, ld_dst);
  for (int64_t r = 0; r < rows; ++r)  // the edges
    for (int64_t c = r < full_rows ? full_cols : 0; c < cols; ++c)
      dst[c * ld_dst + r] = src[r * ld_src + c];
}

void invert_unit_lower(const ChunkRows& x, const float* P, float* X) {
  // Row r: x_r = e_r − Σ_{j<r} β_r P[r,j] x_j, kept in four registers of 16 columns. Row x_j is
  // zero past column j, so its update touches only the registers up to that column.
  static_assert(kChunk == 64, "four 16-float registers per row");
  for (int64_t r = 0; r < x.L; ++r) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    const float beta = x.b(r);
    for (int64_t j = 0; j < r; ++j) {
      const __m512 a = _mm512_set1_ps(-beta * P[r * kLd + j]);
      const float* xj = X + j * kLd;
      for (int64_t b = 0; b <= j / 16; ++b)
        acc[b] = _mm512_fmadd_ps(a, _mm512_loadu_ps(xj + 16 * b), acc[b]);
    }
    float* xr = X + r * kLd;
    for (int64_t b = 0; b < 4; ++b) _mm512_storeu_ps(xr + 16 * b, acc[b]);
    xr[r] = 1.0f;
  }
}

ChunkCore::ChunkCore(Carver& carver, int64_t K, int64_t V)
    : G(carver.take(kChunk * K)),
      gamma(carver.take(kChunk * K)),
      gq(carver.take(2 * kChunk * K)),
      vb(carver.take(kChunk * V)),
      exit(carver.take(kChunk * K)),
      kbar(carver.take(kChunk * K)),
      own(ChunkProducts::at(carver.take(ChunkProducts::floats(V)), V)),
      pairs(carver, K) {}

void ChunkCore::factors(const ChunkRows& x) {
  const int64_t L = x.L, K = x.K;
  std::copy(x.g, x.g + K, G);
  for (int64_t r = 1; r < L; ++r) {
    const float *prev = G + (r - 1) * K, *g = x.g + r * x.ldqk;
    float* Gr = G + r * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) Gr[c] = prev[c] + g[c];
  }
  pairs.prepare(x, G);
  pairs.decays(gamma, gq, exit, kbar);
}

void ChunkCore::compute(const ChunkRows& x, const float* S, const ChunkProducts& p) {
  const int64_t L = x.L, K = x.K, V = x.V;
  factors(x);
  gemm(false, false, L, V, K, 1.0f, gq + L * K, S, 0.0f, p.r);  // (Γ⊙K) S, then r = V − it
  pairs.products(p.Aqk, p.Pkk);
  invert_unit_lower(x, p.Pkk, p.X);
  for (int64_t r = 0; r < L; ++r) {
    const float* v = x.v + r * x.ldv;
    const float beta = x.b(r);
    float *rr = p.r + r * V, *vbr = vb + r * V;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) {
      rr[j] = v[j] - rr[j];
      vbr[j] = beta * rr[j];
    }
  }
  tile_gemm({L, V, L}, {p.X, kLd, false}, {vb, V}, {p.vt, V, false}, {Band::KLe, 0});
}

}  // namespace k3::kernels::kda::chunk
