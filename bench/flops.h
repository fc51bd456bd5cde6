// The timing loop shared by the benchmarks: runs the work and reports GFLOP/s and the fraction of
// the measured fp32 FMA peak, or of another (plain numbers, from the wall time of the loop).
#pragma once

#include <benchmark/benchmark.h>

#include "k3/base/timer.h"
#include "peak.h"

namespace k3::bench {

// `flops` is the work of one call of `body`; of_peak is over peak_gflops (0: the fp32 FMA peak).
template <typename Body>
void run_with_flop_counters(benchmark::State& state, double flops, Body&& body,
                            double peak_gflops = 0) {
  Timer timer;
  for (auto _ : state) {
    body();
    benchmark::ClobberMemory();
  }
  const double gflops = flops * static_cast<double>(state.iterations()) / timer.seconds() / 1e9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["of_peak"] = gflops / (peak_gflops > 0 ? peak_gflops : fma_peak_gflops());
}

}  // namespace k3::bench
