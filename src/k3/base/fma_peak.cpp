#include "k3/base/fma_peak.h"

#include <immintrin.h>
#include <omp.h>


#include "k3/base/threads.h"
#include "k3/base/timer.h"

namespace k3 {
namespace {

// 12 independent FMA chains: enough to cover FMA latency on two FMA ports.
__attribute__((noinline)) float fma_loop(int64_t iters, float seed) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  alignas(64) float lanes[16];
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  _mm512_store_ps(lanes, s);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

}  // namespace

double measure_fma_peak_gflops(int threads, double seconds) {
  if (threads <= 0) threads = num_threads();
  const double flops_per_iter = 12.0 * 16 * 2;
  int64_t iters = 1 << 16;
  // Calibrate on one thread so the timed run lasts about `seconds`.
  for (;;) {
    Timer t;
    volatile float sink = fma_loop(iters, 1.0f);
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
    sink += fma_loop(iters, static_cast<float>(omp_get_thread_num()));
    double s = t.seconds();
    volatile float keep = sink;
    (void)keep;
    double g = flops_per_iter * static_cast<double>(iters) * threads / s / 1e9;
    if (g > best) best = g;
  }
  return best;
}

double fma_peak_gflops() {
  static const double peak = measure_fma_peak_gflops();
  return peak;
}

}  // namespace k3
