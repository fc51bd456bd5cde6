// Benchmarks state every figure as a fraction of the FMA peak measured in the same run, or of a
// multi-threaded 2048³ sgemm timed beside it; memory-bound ones as a fraction of the memory read
// bandwidth measured in the same run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "k3/base/fma_peak.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "k3/kernels/gemm.h"

namespace k3::bench {

// The cached peak, printed once when first measured.
inline double fma_peak_gflops() {
  static const double peak = [] {
    double p = k3::fma_peak_gflops();
    std::printf("fp32 FMA peak measured: %.1f GFLOP/s on %d threads\n", p, num_threads());
    return p;
  }();
  return peak;
}

// The bf16 dot-product peak (vdpbf16ps), cached and printed once like the FMA peak.
inline double bf16_peak_gflops() {
  static const double peak = [] {
    double p = k3::measure_bf16_peak_gflops();
    std::printf("bf16 dot-product peak measured: %.1f GFLOP/s on %d threads\n", p, num_threads());
    return p;
  }();
  return peak;
}

// The memory read bandwidth in GB/s on the benchmark's threads, cached and printed once beside
// the one-thread figure.
inline double read_bandwidth_gbs() {
  static const double bandwidth = [] {
    const double one = k3::measure_read_bandwidth_gbs(1);
    const double all = num_threads() == 1 ? one : k3::measure_read_bandwidth_gbs(num_threads());
    std::printf("memory read bandwidth measured: %.1f GB/s on 1 thread, %.1f GB/s on %d threads\n",
                one, all, num_threads());
    return all;
  }();
  return bandwidth;
}

// A multi-threaded 2048³ sgemm (fixed inputs: its time does not depend on them). Vec holds the
// matrices, for a benchmark that allocates its memory its own way.
template <typename Vec = std::vector<float>>
class Sgemm {
 public:
  Sgemm() : a_(kN * kN, 0.01f), b_(kN * kN, 0.02f), c_(kN * kN) {}
  void run() {
    kernels::gemm(false, false, kN, kN, kN, 1.0f, a_.data(), b_.data(), 0.0f, c_.data());
  }
  static double flops() { return 2.0 * kN * kN * kN; }
  // The best GFLOP/s of `reps` products.
  double best_gflops(int reps) {
    double best = 0;
    for (int rep = 0; rep < reps; ++rep) {
      Timer t;
      run();
      best = std::max(best, flops() / t.seconds() / 1e9);
    }
    return best;
  }

 private:
  static constexpr int64_t kN = 2048;
  Vec a_, b_, c_;
};

}  // namespace k3::bench
