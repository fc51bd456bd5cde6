#include "k3/kernels/gemm_few_rows.h"

#include <omp.h>

#include <algorithm>

#include "k3/base/error.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
#include <immintrin.h>
#define K3_FEW_ROWS_BF16 1
#endif

namespace k3::kernels {

#ifdef K3_FEW_ROWS_BF16
namespace {

__m512bh load_bf16(const uint16_t* p, __mmask32 mask) {
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

constexpr __mmask16 kAll = 0xFFFF;  // the maskz forms with every lane: GCC 12 warns about the
                                    // undefined passthrough of the unmasked shuffles

// Lane 0 of v plus its three other 128-bit lanes.
__m128 fold_lanes(__m512 v) {
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(kAll, v, v, 0xB1));
  return _mm512_maskz_extractf32x4_ps(0xF, v, 0);
}

// The sums of the 16 lanes of v[0..3], as one vector: pairs interleaved and added, then quads,
// then the four 128-bit lanes; 3 operations an output rather than a full reduction each.
__m128 sums_of_four(const __m512* v) {
  const __m512 s01 = _mm512_add_ps(_mm512_maskz_unpacklo_ps(kAll, v[0], v[1]),
                                   _mm512_maskz_unpackhi_ps(kAll, v[0], v[1]));
  const __m512 s23 = _mm512_add_ps(_mm512_maskz_unpacklo_ps(kAll, v[2], v[3]),
                                   _mm512_maskz_unpackhi_ps(kAll, v[2], v[3]));
  const __m512d lo = _mm512_maskz_unpacklo_pd(0xFF, _mm512_castps_pd(s01), _mm512_castps_pd(s23));
  const __m512d hi = _mm512_maskz_unpackhi_pd(0xFF, _mm512_castps_pd(s01), _mm512_castps_pd(s23));
  return fold_lanes(_mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi)));
}

// Rows [r0, r0 + R) of A against rows [n0, n0 + COLS) of B (COLS 4 or 1): R·COLS accumulators,
// each B chunk loaded once for the R rows. The last chunk of K is masked (its missing pairs read
// as zeros).
template <int R, int COLS>
void block(const GemmArgs& g, const uint16_t* a, const uint16_t* b, int64_t r0, int64_t n0) {
  static_assert(COLS == 4 || COLS == 1);
  // Locals and fully unrolled loops, so that the accumulators stay in registers.
  const int64_t K = g.K, lda = g.lda, ldb = g.ldb;
  const uint16_t* x_rows = a + r0 * lda;
  const uint16_t* w_rows = b + n0 * ldb;
  __m512 acc[R][COLS];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < COLS; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    const __mmask32 mask = K - k >= 32 ? ~__mmask32{0} : (__mmask32{1} << (K - k)) - 1;
    __m512bh w[COLS];
#pragma GCC unroll 4
    for (int c = 0; c < COLS; ++c) {
      w[c] = load_bf16(w_rows + c * ldb + k, mask);
      // The next block's rows, ahead of their use: each row is too short a stream for the
      // hardware prefetchers to pick up in time.
      _mm_prefetch(reinterpret_cast<const char*>(w_rows + (COLS + c) * ldb + k), _MM_HINT_T0);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512bh x = load_bf16(x_rows + r * lda + k, mask);
#pragma GCC unroll 4
      for (int c = 0; c < COLS; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], x, w[c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float* out = g.C + (r0 + r) * g.ldc + n0;
    const __m128 sums = COLS == 4 ? sums_of_four(acc[r]) : fold_lanes(acc[r][0]);
    // Within the first 128-bit lane, (x0 x1 x2 x3) + (x2 x3 x0 x1), then + (x1 x0 x3 x2).
    const __m128 one = COLS == 4 ? sums : [&] {
      const __m128 h = _mm_add_ps(sums, _mm_movehl_ps(sums, sums));
      return _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    }();
    for (int c = 0; c < COLS; ++c) {
      const float v = g.alpha * one[c];
      out[c] = g.beta == 0.0f ? v : v + g.beta * out[c];
    }
  }
}

// Rows of B four at a time, then one at a time, against rows of A four at a time (at most 16
// accumulators); over the threads when called from serial code and B is large enough to share.
template <int R>
void rows(const GemmArgs& g, const uint16_t* a, const uint16_t* b) {
  const int64_t blocks = g.N / 4;
  const bool threaded = !omp_in_parallel() && g.N * g.K >= (int64_t{1} << 16);
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t i = 0; i < blocks; ++i) {
    block<std::min(R, 4), 4>(g, a, b, 0, 4 * i);
    if constexpr (R > 4) block<R - 4, 4>(g, a, b, 4, 4 * i);
  }
  for (int64_t n = 4 * blocks; n < g.N; ++n) {
    block<std::min(R, 4), 1>(g, a, b, 0, n);
    if constexpr (R > 4) block<R - 4, 1>(g, a, b, 4, n);
  }
}

}  // namespace

bool few_rows_bf16_built() { return true; }

void gemm_few_rows_bf16(const GemmArgs& g, const uint16_t* a, const uint16_t* b) {
  K3_CHECK(!g.trans_a && g.trans_b && g.M >= 1 && g.M <= kFewRows,
           "gemm_few_rows_bf16: expects A·Bᵀ of 1 to ", kFewRows, " rows, got M=", g.M);
  switch (g.M) {
    case 1: return rows<1>(g, a, b);
    case 2: return rows<2>(g, a, b);
    case 3: return rows<3>(g, a, b);
    case 4: return rows<4>(g, a, b);
    case 5: return rows<5>(g, a, b);
    case 6: return rows<6>(g, a, b);
    case 7: return rows<7>(g, a, b);
    default: return rows<8>(g, a, b);
  }
}

#else

bool few_rows_bf16_built() { return false; }

void gemm_few_rows_bf16(const GemmArgs&, const uint16_t*, const uint16_t*) {
  K3_CHECK(false, "gemm_few_rows_bf16: this build has no AVX512-BF16 kernel");
}

#endif

}  // namespace k3::kernels
