#include "k3/kernels/attention_tiles.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace k3::kernels::attn {
namespace {

// Register block: kMr rows of C by up to kNv 16-float vectors (6 x 4 = 24 accumulators). Each step
// of k loads kNv vectors of B and broadcasts kMr values of A into fused multiply-adds.
constexpr int kMr = 6, kNv = 4, kNr = 16 * kNv;

// The unroll pragmas keep acc in registers: without them GCC also stores it on every step.
template <int MR, int NV, bool kATrans>
void micro(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
           int64_t ldc, bool accumulate, __mmask16 tail) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, b + 16 * (NV - 1));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(kATrans ? A[k * lda + r] : A[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* c = C + r * ldc + 16 * v;
      const __mmask16 m = v == NV - 1 ? tail : __mmask16(0xFFFF);
      __m512 x = acc[r][v];
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, c));
      _mm512_mask_storeu_ps(c, m, x);
    }
}

using MicroFn = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                         bool, __mmask16);

template <bool kATrans, int... R, int... V>
constexpr auto make_table(std::integer_sequence<int, R...>, std::integer_sequence<int, V...>) {
  std::array<std::array<MicroFn, kNv>, kMr> t{};
  auto row = [&]<int MR>(std::integral_constant<int, MR>) {
    ((t[MR - 1][V] = &micro<MR, V + 1, kATrans>), ...);
  };
  (row(std::integral_constant<int, R + 1>{}), ...);
  return t;
}

template <bool kATrans>
constexpr auto kTable = make_table<kATrans>(std::make_integer_sequence<int, kMr>{},
                                            std::make_integer_sequence<int, kNv>{});

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

void tile_gemm(Dims d, Lhs a, Rhs b, Out c, Region region) {
  const auto& table = a.trans ? kTable<true> : kTable<false>;
  for (int64_t n0 = 0; n0 < d.N; n0 += kNr) {
    for (int64_t r = 0; r < d.M; r += kMr) {
      const int64_t mr = std::min<int64_t>(kMr, d.M - r), off = region.off;
      int64_t c_lo = n0, c_hi = std::min(d.N, n0 + kNr), k_lo = 0, k_hi = d.K;
      switch (region.band) {  // clip to the band of rows [r, r + mr)
        case Band::ColLe:
          c_hi = std::min(c_hi, r + mr + off);
          break;
        case Band::ColGe:
          c_lo = std::max(c_lo, n0 + (r + off - n0) / 16 * 16);
          break;
        case Band::KLe:
          k_hi = std::min(k_hi, r + mr + off);
          break;
        case Band::KGe:
          k_lo = std::max<int64_t>(0, std::min(k_hi, r + off));
          break;
      }
      if (c_hi <= c_lo || (c.accumulate && k_hi <= k_lo)) continue;
      k_hi = std::max(k_hi, k_lo);
      const int64_t width = c_hi - c_lo, nv = (width + 15) / 16;
      const auto tail = static_cast<__mmask16>(0xFFFFu >> (16 * nv - width));
      const float* ap = a.trans ? a.p + k_lo * a.ld + r : a.p + r * a.ld + k_lo;
      table[mr - 1][nv - 1](k_hi - k_lo, ap, a.ld, b.p + k_lo * b.ld + c_lo, b.ld,
                            c.p + r * c.ld + c_lo, c.ld, c.accumulate, tail);
    }
  }
}

void scores(const AttentionShape& s, int64_t M, int64_t N, Lhs a_n, Lhs a_r, const float* bt,
            float* out, Region region) {
  tile_gemm({M, N, s.dqk}, a_n, {bt, kBlock}, {out, kBlock, false}, region);
  if (s.dr > 0)
    tile_gemm({M, N, s.dr}, a_r, {bt + s.dqk * kBlock, kBlock}, {out, kBlock, true}, region);
}

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

float* thread_buffer(Slot slot, size_t n) {
  struct Buffer {
    std::unique_ptr<float[], decltype(&std::free)> data{nullptr, &std::free};
    size_t size = 0;
  };
  thread_local Buffer buffers[static_cast<int>(Slot::Chunk) + 1];
  Buffer& b = buffers[static_cast<int>(slot)];
  if (b.size < n) {
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    b.data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!b.data) throw std::bad_alloc();
    b.size = n;
  }
  return b.data.get();
}

}  // namespace k3::kernels::attn
