// Tiled causal attention, forward and forward+backward, against the FMA peak and a multi-threaded
// sgemm measured side by side. FLOPs count only the unmasked half: P = T(T+1)/2 query-key pairs per
// head, forward 2·B·H·P·(dqk + dr + dv), backward 2.5x forward (five products against two).
// bf16 = 1 runs the products in bf16 (AttentionShape::precision, docs/precision.md).
#include "k3/kernels/attention.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <vector>

#include "flops.h"
#include "k3/base/philox.h"
#include "k3/base/threads.h"

namespace {

using k3::kernels::AttentionShape;

// Uniform in (-1, 1).
std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  k3::fill_uniform(v.data(), static_cast<int64_t>(n), seed, 0, 0, -1.0f, 1.0f);
  return v;
}

// Best of a few multi-threaded 2048³ products.
double measure_sgemm_gflops(int reps) { return k3::bench::Sgemm<>().best_gflops(reps); }

double forward_flops(const AttentionShape& s) {
  const double pairs = static_cast<double>(s.T) * static_cast<double>(s.T + 1) / 2;
  return 2.0 * static_cast<double>(s.B * s.H) * pairs * static_cast<double>(s.dqk + s.dr + s.dv);
}

void BM_attention(benchmark::State& state) {
  AttentionShape s{
      1, state.range(0), state.range(4), state.range(1), state.range(2), state.range(3), 0};
  if (state.range(6)) s.precision = k3::kernels::Precision::BF16;
  const bool backward = state.range(5) != 0;
  const auto n = static_cast<size_t>(s.B * s.T * s.H);
  const auto q = random_floats(n * (s.dqk + s.dr), 3), k = random_floats(n * s.dqk, 4),
             kr = random_floats(static_cast<size_t>(s.B * s.T * s.dr), 5),
             v = random_floats(n * s.dv, 6), dout = random_floats(n * s.dv, 7);
  std::vector<float> out(n * s.dv), lse(n), dq(n * (s.dqk + s.dr)), dk(n * s.dqk),
      dkr(static_cast<size_t>(s.B * s.T * s.dr)), dv(n * s.dv);
  const float* krp = s.dr > 0 ? kr.data() : nullptr;
  auto step = [&] {
    k3::kernels::attention_forward(s, q.data(), k.data(), krp, v.data(), out.data(), lse.data());
    if (backward)
      k3::kernels::attention_backward(s, q.data(), k.data(), krp, v.data(), out.data(), lse.data(),
                                      dout.data(), dq.data(), dk.data(),
                                      s.dr > 0 ? dkr.data() : nullptr, dv.data());
  };
  // The host is shared: the sgemm yardstick is measured right before each case.
  const double sgemm = measure_sgemm_gflops(3);
  step();  // warm the per-thread buffers
  k3::bench::run_with_flop_counters(state, forward_flops(s) * (backward ? 3.5 : 1.0), step);
  state.counters["sgemm"] = sgemm;
  state.counters["x_sgemm"] = state.counters["GFLOP/s"] / sgemm;
}

// Plain heads (dqk = dv = 64 or 128), forward and forward+backward, and one MLA shape; three of
// them again in bf16.
BENCHMARK(BM_attention)
    ->ArgNames({"T", "dqk", "dr", "dv", "H", "bwd", "bf16"})
    ->Args({1024, 64, 0, 64, 8, 0, 0})
    ->Args({1024, 64, 0, 64, 8, 1, 0})
    ->Args({1024, 128, 0, 128, 8, 0, 0})
    ->Args({1024, 128, 0, 128, 8, 1, 0})
    ->Args({4096, 64, 0, 64, 4, 0, 0})
    ->Args({4096, 64, 0, 64, 4, 1, 0})
    ->Args({4096, 128, 0, 128, 4, 0, 0})
    ->Args({4096, 128, 0, 128, 4, 1, 0})
    ->Args({4096, 128, 64, 128, 4, 1, 0})
    ->Args({1024, 64, 0, 64, 8, 1, 1})
    ->Args({1024, 128, 0, 128, 8, 1, 1})
    ->Args({4096, 128, 64, 128, 4, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  k3::set_num_threads();
  benchmark::Initialize(&argc, argv);
  k3::bench::fma_peak_gflops();  // measured (and printed) before the runs
  std::printf("sgemm 2048^3 measured: %.1f GFLOP/s on %d threads\n", measure_sgemm_gflops(6),
              k3::num_threads());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
