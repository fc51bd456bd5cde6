// The machine's fp32 FMA peak, measured with a tiny loop at the start of every benchmark run, so
// each figure can be printed as a fraction of what this host delivers right now.
#pragma once

namespace k3::bench {

// GFLOP/s (2 flops per FMA lane) over `threads` threads (0: all), measured for ~`seconds`.
double measure_fma_peak_gflops(int threads = 0, double seconds = 0.3);

// Measured once per process (all threads), then cached.
double fma_peak_gflops();

}  // namespace k3::bench
