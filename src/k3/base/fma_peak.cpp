#include "k3/base/fma_peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "k3/base/arena.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"

namespace k3 {
namespace {

constexpr int kChains = 12;  // independent chains: enough to cover the latency on two ports

// kChains chains of `step` (acc ← step(acc)), iters times; returns their sum, so that nothing is
// optimized away.
template <typename Step>
__attribute__((always_inline)) inline float chain_loop(int64_t iters, float seed, Step step) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = step(acc[i]);
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  // Summed through memory: GCC 12's _mm512_reduce_add_ps reads a half register it never set
  // (-Wuninitialized), and this sum runs once.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

// fp32: one FMA, 16 lanes x 2 flops.
__attribute__((noinline)) float fma_loop(int64_t iters, float seed) {
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  return chain_loop(iters, seed, [&](__m512 acc) { return _mm512_fmadd_ps(acc, a, b); });
}

#ifdef __AVX512BF16__
// bf16: one vdpbf16ps, 16 lanes x 2 products x 2 flops.
__attribute__((noinline)) float bf16_dot_loop(int64_t iters, float seed) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  return chain_loop(iters, seed, [&](__m512 acc) { return _mm512_dpbf16_ps(acc, a, a); });
}
#endif

// GFLOP/s of `loop` (flops_per_iter each iteration) on `threads` threads for ~`seconds`.
double measure(float (*loop)(int64_t, float), double flops_per_iter, int threads, double seconds) {
  if (threads <= 0) threads = num_threads();
  int64_t iters = 1 << 16;
  // Calibrate on one thread so the timed run lasts about `seconds`.
  for (;;) {
    Timer t;
    volatile float sink = loop(iters, 1.0f);
    (void)sink;
    if (t.seconds() > seconds / 4 || iters > (int64_t{1} << 34)) {
      iters = static_cast<int64_t>(static_cast<double>(iters) * seconds / t.seconds());
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int rep = 0; rep < 2; ++rep) {
    Timer t;
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += loop(iters, static_cast<float>(omp_get_thread_num()));
    double s = t.seconds();
    volatile float keep = sink;
    (void)keep;
    double g = flops_per_iter * static_cast<double>(iters) * threads / s / 1e9;
    if (g > best) best = g;
  }
  return best;
}

// The sum of n floats at p (64-byte aligned, n a multiple of 128): eight independent chains of
// 512-bit loads and adds, enough to keep the loads in flight.
__attribute__((noinline)) float sum_floats(const float* p, int64_t n) {
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 128)
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(p + i + 16 * j));
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc[0]);
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

}  // namespace

double measure_fma_peak_gflops(int threads, double seconds) {
  return measure(fma_loop, kChains * 16 * 2, threads, seconds);
}

double fma_peak_gflops() {
  static const double peak = measure_fma_peak_gflops();
  return peak;
}

double measure_bf16_peak_gflops(int threads, double seconds) {
#ifdef __AVX512BF16__
  return measure(bf16_dot_loop, kChains * 16 * 2 * 2, threads, seconds);
#else
  (void)threads, (void)seconds;
  return 0;
#endif
}

double measure_read_bandwidth_gbs(int threads, int reps) {
  if (threads <= 0) threads = num_threads();
  // 1 GiB, far larger than every cache (L3: tens of MiB), so that each pass streams from memory;
  // mapped like the weights (huge pages where allowed: under a hypervisor 4 KiB pages' walks cost
  // a third of the rate) and touched before the timed passes.
  constexpr size_t kBytes = size_t{1} << 30;
  const float* data = static_cast<const float*>(map_buffer(kBytes));
  const int64_t share = static_cast<int64_t>(kBytes / sizeof(float)) / threads / 128 * 128;
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += sum_floats(data + share * omp_get_thread_num(), share);
    const double s = t.seconds();
    volatile float keep = sink;
    (void)keep;
    best = std::max(best, static_cast<double>(share * threads) * sizeof(float) / s / 1e9);
  }
  unmap_buffer(const_cast<float*>(data), kBytes);
  return best;
}

}  // namespace k3
