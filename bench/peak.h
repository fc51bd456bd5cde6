// Benchmarks state every figure as a fraction of the FMA peak measured in the same run.
#pragma once

#include <cstdio>

#include "k3/base/fma_peak.h"
#include "k3/base/threads.h"

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

}  // namespace k3::bench
