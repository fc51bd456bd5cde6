// The machine's fp32 FMA peak (and its bf16 dot-product peak), measured with a tiny loop, and its
// memory read bandwidth, measured with a streaming sum, so throughput can be stated as a fraction
// of what this host delivers now (benchmarks, and MFU in training metrics).
#pragma once

namespace k3 {

// GFLOP/s (2 flops per FMA lane) over `threads` threads (0: all), measured for ~`seconds`.
double measure_fma_peak_gflops(int threads = 0, double seconds = 0.1);

// Measured once per process (all threads), then cached.
double fma_peak_gflops();

// The bf16 dot-product peak (vdpbf16ps: 2 flops per product, fp32 accumulation), measured the
// same way; 0 where the build does not target AVX512-BF16.
double measure_bf16_peak_gflops(int threads = 0, double seconds = 0.1);

// GB/s (1e9 bytes) a streaming read of a 1 GiB buffer sustains on `threads` threads (0: all),
// each summing its contiguous share: the best of `reps` passes, its pages touched before them.
double measure_read_bandwidth_gbs(int threads = 0, int reps = 5);

}  // namespace k3
