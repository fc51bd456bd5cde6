#include "k3/kernels/kda/chunk_tiles.h"

#include <immintrin.h>

namespace k3::kernels::kda::chunk {

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

ChunkCore::ChunkCore(Carver& carver, int64_t K)
    : G(carver.take(kChunk * K)),
      gamma(carver.take(kChunk * K)),
      gq(carver.take(2 * kChunk * K)),
      exit(carver.take(kChunk * K)),
      kbar(carver.take(kChunk * K)),
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

}  // namespace k3::kernels::kda::chunk
