#include "k3/kernels/gemm_few_rows.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <utility>

#include "k3/base/error.h"

#ifdef __AVX512F__
#include <immintrin.h>
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define K3_FEW_ROWS_BF16 1
#endif
#endif

namespace k3::kernels {

#ifdef __AVX512F__
namespace {

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

// The two element types: a chunk of a row in one 512-bit register, masked loads (missing
// elements read as zeros) and the multiply-add into 16 fp32 lanes.
struct F32 {
  using T = float;
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int64_t kChunk = 16;
  static Vec load(const T* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static __m512 madd(__m512 acc, Vec x, Vec w) { return _mm512_fmadd_ps(x, w, acc); }
};

#ifdef K3_FEW_ROWS_BF16
struct Bf16 {
  using T = uint16_t;
  using Vec = __m512bh;
  using Mask = __mmask32;
  static constexpr int64_t kChunk = 32;  // 32 pairs a vdpbf16ps
  static Vec load(const T* p, Mask m) {
    return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, p));
  }
  static __m512 madd(__m512 acc, Vec x, Vec w) { return _mm512_dpbf16_ps(acc, x, w); }
};
#endif

// The R rows of A against rows [n0, n0 + COLS) of B (COLS 4 or 1): R accumulators in registers
// while a row of B is read, R·COLS sums reduced at the end. B's rows are read one after the other,
// each from start to end: the hardware prefetchers follow one sequential stream at the memory's
// rate, where four rows read side by side (each chunk loaded once for every column) ran at less
// than half of it. The last chunk of K is masked.
template <typename E, int R, int COLS>
void block(const GemmArgs& g, const typename E::T* a, const typename E::T* b, int64_t n0) {
  static_assert(COLS == 4 || COLS == 1);
  // Locals and fully unrolled loops, so that the accumulators stay in registers.
  const int64_t K = g.K, lda = g.lda, ldb = g.ldb, tail = K % E::kChunk;
  const typename E::Mask all = static_cast<typename E::Mask>(~typename E::Mask{0}),
                         last =
                             tail ? static_cast<typename E::Mask>((uint64_t{1} << tail) - 1) : all;
  __m512 acc[R][COLS];
#pragma GCC unroll 4
  for (int c = 0; c < COLS; ++c) {
    const typename E::T* w_row = b + (n0 + c) * ldb;
    // This row's sums apart from acc, which the reduction below reads through a pointer: summed
    // into acc itself, GCC stored every accumulator to memory at every step.
    __m512 sum[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) sum[r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += E::kChunk) {
      const typename E::Mask mask = K - k >= E::kChunk ? all : last;
      const typename E::Vec w = E::load(w_row + k, mask);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sum[r] = E::madd(sum[r], E::load(a + r * lda + k, mask), w);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][c] = sum[r];
  }
  for (int r = 0; r < R; ++r) {
    float* out = g.C + r * g.ldc + n0;
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

// The least of B a thread is given. Waking a sleeping thread (the passive OpenMP wait,
// base/threads.h) costs 10-30 µs, and one core reads 2 MiB in 30-60 µs from memory (sooner from
// the L3, where a small model's weights stay between steps): a B that fits in a core's L2 is read
// sooner by the calling thread alone, a large one streamed by as many threads as it has 2 MiB
// shares. Measured on 2 cores, decoding's products of a d-384 model read 40-45 GB/s so against
// 17-26 GB/s with every product of 64 K elements or more split over both threads.
constexpr int64_t kMinBytesPerThread = int64_t{2} << 20;

// Rows of B four at a time, then one at a time, against every row of A; over as many threads as B
// has kMinBytesPerThread shares, when called from serial code.
template <typename E, int R>
void rows(const GemmArgs& g, const typename E::T* a, const typename E::T* b) {
  const int64_t blocks = g.N / 4, bytes = static_cast<int64_t>(sizeof(typename E::T)) * g.N * g.K;
  const int threads = omp_in_parallel()
                          ? 1
                          : static_cast<int>(std::clamp<int64_t>(bytes / kMinBytesPerThread, 1,
                                                                 omp_get_max_threads()));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t i = 0; i < blocks; ++i) block<E, R, 4>(g, a, b, 4 * i);
  for (int64_t n = 4 * blocks; n < g.N; ++n) block<E, R, 1>(g, a, b, n);
}

// rows<E, R> for R = 1..kFewRows, indexed by R - 1.
template <typename E, int... R>
constexpr auto row_kernels(std::integer_sequence<int, R...>) {
  return std::array{&rows<E, R + 1>...};
}

template <typename E>
void few_rows(const GemmArgs& g, const typename E::T* a, const typename E::T* b) {
  K3_CHECK(!g.trans_a && g.trans_b && g.M >= 1 && g.M <= kFewRows,
           "gemm_few_rows: expects A·Bᵀ of 1 to ", kFewRows, " rows, got M=", g.M);
  static constexpr auto kernels = row_kernels<E>(std::make_integer_sequence<int, kFewRows>{});
  kernels[static_cast<size_t>(g.M - 1)](g, a, b);
}

}  // namespace

bool few_rows_f32_built() { return true; }

void gemm_few_rows_f32(const GemmArgs& g) { few_rows<F32>(g, g.A, g.B); }

#else

bool few_rows_f32_built() { return false; }

void gemm_few_rows_f32(const GemmArgs&) {
  K3_CHECK(false, "gemm_few_rows_f32: this build has no AVX-512 kernel");
}

#endif

#ifdef K3_FEW_ROWS_BF16

bool few_rows_bf16_built() { return true; }

void gemm_few_rows_bf16(const GemmArgs& g, const uint16_t* a, const uint16_t* b) {
  few_rows<Bf16>(g, a, b);
}

#else

bool few_rows_bf16_built() { return false; }

void gemm_few_rows_bf16(const GemmArgs&, const uint16_t*, const uint16_t*) {
  K3_CHECK(false, "gemm_few_rows_bf16: this build has no AVX512-BF16 kernel");
}

#endif

}  // namespace k3::kernels
