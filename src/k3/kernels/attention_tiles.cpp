#include "k3/kernels/attention_tiles.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "k3/base/error.h"
#include "k3/tensor/bf16.h"

namespace k3::kernels::attn {
namespace {

// Register block: kMr rows of C by up to kNv 16-float vectors (6 x 4 = 24 accumulators). Each step
// of k loads kNv vectors of B and broadcasts kMr values of A into fused multiply-adds.
constexpr int kMr = 6, kNv = 4, kNr = 16 * kNv;

// Writes (or adds) the accumulators to C; the last vector of each row is masked by `tail`.
template <int MR, int NV>
inline void store(const __m512 (&acc)[MR][NV], float* C, int64_t ldc, bool accumulate,
                  __mmask16 tail) {
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
  store(acc, C, ldc, accumulate, tail);
}

// The bf16 register block: as micro, over P pairs of k. A pair of A (row r, pair p) is one 32-bit
// word, at A[p*lda + r] when kATrans, else A[r*lda + p]; B holds pairs [P][ldb]; the first of a
// pair is the low half. kNative: vdpbf16ps, which adds the product of the high halves, then that
// of the low halves, each exact in fp32; otherwise two fused multiply-adds in that order.
template <int MR, int NV, bool kATrans, bool kNative>
void micro_bf16(int64_t P, const uint32_t* A, int64_t lda, const uint32_t* B, int64_t ldb, float* C,
                int64_t ldc, bool accumulate, __mmask16 tail) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t p = 0; p < P; ++p) {
    const uint32_t* b = B + p * ldb;
    __m512i bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_si512(b + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_epi32(tail, b + 16 * (NV - 1));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512i a =
          _mm512_set1_epi32(static_cast<int>(kATrans ? A[p * lda + r] : A[r * lda + p]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if constexpr (kNative) {
#ifdef __AVX512BF16__
          acc[r][v] = _mm512_dpbf16_ps(acc[r][v], reinterpret_cast<__m512bh>(a),
                                       reinterpret_cast<__m512bh>(bv[v]));
#endif
        } else {
          const __m512 a_hi = _mm512_castsi512_ps(_mm512_and_si512(a, high));
          const __m512 b_hi = _mm512_castsi512_ps(_mm512_and_si512(bv[v], high));
          acc[r][v] = _mm512_fmadd_ps(a_hi, b_hi, acc[r][v]);
          acc[r][v] = _mm512_fmadd_ps(
              _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, a, 16)),
              _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, bv[v], 16)), acc[r][v]);
        }
      }
    }
  }
  store(acc, C, ldc, accumulate, tail);
}

template <typename T>
using MicroFn = void (*)(int64_t, const T*, int64_t, const T*, int64_t, float*, int64_t, bool,
                         __mmask16);

// Kind::fn<MR, NV> is the register block of MR rows and NV vectors.
template <typename Kind, int... R, int... V>
constexpr auto make_table(std::integer_sequence<int, R...>, std::integer_sequence<int, V...>) {
  std::array<std::array<typename Kind::Fn, kNv>, kMr> t{};
  auto row = [&]<int MR>(std::integral_constant<int, MR>) {
    ((t[MR - 1][V] = Kind::template fn<MR, V + 1>), ...);
  };
  (row(std::integral_constant<int, R + 1>{}), ...);
  return t;
}

template <typename Kind>
constexpr auto kTable = make_table<Kind>(std::make_integer_sequence<int, kMr>{},
                                         std::make_integer_sequence<int, kNv>{});

template <bool kATrans>
struct F32Block {
  using Fn = MicroFn<float>;
  template <int MR, int NV>
  static constexpr Fn fn = &micro<MR, NV, kATrans>;
};

template <bool kATrans, bool kNative>
struct Bf16Block {
  using Fn = MicroFn<uint32_t>;
  template <int MR, int NV>
  static constexpr Fn fn = &micro_bf16<MR, NV, kATrans, kNative>;
};

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

// Calls f(r, mr, c_lo, c_hi, k_lo, k_hi) for the register blocks of rows [r, r + mr) and
// columns [c_lo, c_hi) that the region needs, with the reduction clipped to [k_lo, k_hi).
template <typename F>
void for_each_block(Dims d, Region region, bool accumulate, F f) {
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
      if (c_hi <= c_lo || (accumulate && k_hi <= k_lo)) continue;
      f(r, mr, c_lo, c_hi, k_lo, std::max(k_hi, k_lo));
    }
  }
}

// The mask of the last of the vectors that cover `width` columns.
__mmask16 tail_mask(int64_t width) {
  return static_cast<__mmask16>(0xFFFFu >> ((16 - width % 16) % 16));
}

// Which columns [lo, hi) of row `row` of A as stored (of k when A is stored transposed) lie in
// the region's band; `cols` is the row's length.
std::pair<int64_t, int64_t> band_columns(Region region, bool trans, int64_t row, int64_t cols) {
  int64_t lo = 0, hi = cols;
  if (region.band == Band::KLe) {  // k <= r + off
    if (trans)
      lo = row - region.off;
    else
      hi = row + region.off + 1;
  } else if (region.band == Band::KGe) {  // k >= r + off
    if (trans)
      hi = row - region.off + 1;
    else
      lo = row + region.off;
  }
  lo = std::clamp<int64_t>(lo, 0, cols);
  return {lo, std::clamp<int64_t>(hi, lo, cols)};
}

// Row `row` of src rounded to bf16 into out[0, cols): columns keep(row) = [lo, hi), zeros
// elsewhere.
template <typename Keep>
void round_row(const float* src, int64_t ld, int64_t row, int64_t cols, Keep keep, uint16_t* out) {
  const auto [lo, hi] = keep(row);
  std::fill(out, out + lo, uint16_t{0});
  float_to_bf16(src + row * ld + lo, out + lo, hi - lo);
  std::fill(out + hi, out + cols, uint16_t{0});
}

// The rows of src rounded to bf16 and paired: out[p*cols + c] holds row 2p (low half) and row
// 2p + 1 (high half, zero past the last row) of column c. `two_rows` is scratch of 2 * cols.
template <typename Keep>
void pack_pairs(const float* src, int64_t ld, int64_t rows, int64_t cols, Keep keep,
                uint16_t* two_rows, uint32_t* out) {
  uint16_t *even = two_rows, *odd = two_rows + cols;
  for (int64_t p = 0; 2 * p < rows; ++p) {
    round_row(src, ld, 2 * p, cols, keep, even);
    if (2 * p + 1 < rows)
      round_row(src, ld, 2 * p + 1, cols, keep, odd);
    else
      std::fill(odd, odd + cols, uint16_t{0});
    uint32_t* o = out + p * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] = uint32_t{even[c]} | uint32_t{odd[c]} << 16;
  }
}

auto all_columns(int64_t cols) {
  return [cols](int64_t) { return std::pair<int64_t, int64_t>{0, cols}; };
}

void tile_gemm_f32(Dims d, Lhs a, Rhs b, Out c, Region region) {
  const auto& table = a.trans ? kTable<F32Block<true>> : kTable<F32Block<false>>;
  for_each_block(
      d, region, c.accumulate,
      [&](int64_t r, int64_t mr, int64_t c_lo, int64_t c_hi, int64_t k_lo, int64_t k_hi) {
        const float* ap = a.trans ? a.p + k_lo * a.ld + r : a.p + r * a.ld + k_lo;
        table[mr - 1][(c_hi - c_lo + 15) / 16 - 1](k_hi - k_lo, ap, a.ld, b.p + k_lo * b.ld + c_lo,
                                                   b.ld, c.p + r * c.ld + c_lo, c.ld, c.accumulate,
                                                   tail_mask(c_hi - c_lo));
      });
}

// Both operands rounded once into pairs along k: A as rows of pairs (or, stored transposed, as
// pairs of its rows), B as pairs of its rows. A's terms outside the band are zeroed, so a block
// whose k range is widened to whole pairs adds nothing.
void tile_gemm_bf16(Dims d, Lhs a, Rhs b, Out c, Region region) {
  const int64_t P = (d.K + 1) / 2, lda = a.trans ? d.M : P;
  const int64_t words = d.M * P + P * d.N + std::max({d.M, d.N, 2 * P});
  auto* ap = reinterpret_cast<uint32_t*>(thread_buffer(Slot::Bf16, static_cast<size_t>(words)));
  uint32_t* bp = ap + d.M * P;
  auto* rows = reinterpret_cast<uint16_t*>(bp + P * d.N);
  auto keep_a = [&](int64_t row) {
    return band_columns(region, a.trans, row, a.trans ? d.M : d.K);
  };
  if (a.trans) {
    pack_pairs(a.p, a.ld, d.K, d.M, keep_a, rows, ap);
  } else {
    for (int64_t r = 0; r < d.M; ++r) {
      auto* out = reinterpret_cast<uint16_t*>(ap + r * P);
      round_row(a.p, a.ld, r, d.K, keep_a, out);
      if (d.K % 2) out[d.K] = 0;
    }
  }
  if (b.rounded && b.rounded->pairs) {
    K3_CHECK(b.rounded->K == d.K && b.rounded->N == d.N, "tile_gemm: B was rounded as ",
             b.rounded->K, "x", b.rounded->N, ", the product reads ", d.K, "x", d.N);
    bp = const_cast<uint32_t*>(b.rounded->pairs);
  } else {
    pack_pairs(b.p, b.ld, d.K, d.N, all_columns(d.N), rows, bp);
  }
  const bool native = bf16_dot_products();
  const auto& table =
      a.trans ? (native ? kTable<Bf16Block<true, true>> : kTable<Bf16Block<true, false>>)
              : (native ? kTable<Bf16Block<false, true>> : kTable<Bf16Block<false, false>>);
  for_each_block(
      d, region, c.accumulate,
      [&](int64_t r, int64_t mr, int64_t c_lo, int64_t c_hi, int64_t k_lo, int64_t k_hi) {
        const int64_t p_lo = k_lo / 2, p_hi = (k_hi + 1) / 2;
        const uint32_t* a0 = a.trans ? ap + p_lo * d.M + r : ap + r * P + p_lo;
        table[mr - 1][(c_hi - c_lo + 15) / 16 - 1](p_hi - p_lo, a0, lda, bp + p_lo * d.N + c_lo,
                                                   d.N, c.p + r * c.ld + c_lo, c.ld, c.accumulate,
                                                   tail_mask(c_hi - c_lo));
      });
}

}  // namespace

void tile_gemm(Dims d, Lhs a, Rhs b, Out c, Region region, Precision precision) {
  if (precision == Precision::BF16)
    tile_gemm_bf16(d, a, b, c, region);
  else
    tile_gemm_f32(d, a, b, c, region);
}

RoundedRhs round_rhs(Rhs b, int64_t K, int64_t N, uint32_t* out, Precision precision) {
  if (precision != Precision::BF16) return {};
  auto* two_rows = reinterpret_cast<uint16_t*>(thread_buffer(Slot::Bf16, static_cast<size_t>(N)));
  pack_pairs(b.p, b.ld, K, N, all_columns(N), two_rows, out);
  return {out, K, N};
}

ScoresRhs scores_rhs(const AttentionShape& s, const float* bt, int64_t N, uint32_t* out) {
  return {bt, round_rhs({bt, kBlock}, s.dqk, N, out, s.precision),
          round_rhs({bt + s.dqk * kBlock, kBlock}, s.dr, N, out + rounded_words(s.dqk, kBlock),
                    s.precision)};
}

void scores(const AttentionShape& s, int64_t M, int64_t N, Lhs a_n, Lhs a_r, const ScoresRhs& b,
            float* out, Region region) {
  tile_gemm({M, N, s.dqk}, a_n, {b.bt, kBlock, &b.n}, {out, kBlock, false}, region, s.precision);
  if (s.dr > 0)
    tile_gemm({M, N, s.dr}, a_r, {b.bt + s.dqk * kBlock, kBlock, &b.r}, {out, kBlock, true}, region,
              s.precision);
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
  thread_local Buffer buffers[static_cast<int>(Slot::Bf16) + 1];
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
