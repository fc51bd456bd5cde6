// The LM head + cross-entropy over N = 4096 tokens, d = 768, V = 32768, fused (chunks of tokens
// through a chunk × V workspace) against unfused (the whole N × V logits), with the same kernels:
// time, and the extra memory each holds beyond inputs and gradients. A summary line at the end
// gives fused / unfused for both.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "flops.h"
#include "k3/base/philox.h"
#include "k3/base/threads.h"
#include "k3/kernels/cross_entropy.h"
#include "k3/kernels/gemm.h"

namespace {

constexpr int64_t kN = 4096, kD = 768, kV = 32768;
constexpr int32_t kIgnore = -100;
constexpr double kFlops = 3 * 2.0 * kN * kD * kV;  // logits, dh, dW

struct Problem {
  std::vector<float> h, w, dh, dw;
  std::vector<int32_t> targets;
};

// Shared by every run, allocated and touched once.
Problem& problem() {
  static Problem p = [] {
    Problem q{std::vector<float>(kN * kD), std::vector<float>(kV * kD), std::vector<float>(kN * kD),
              std::vector<float>(kV * kD, 0.0f), std::vector<int32_t>(kN)};
    k3::fill_uniform(q.h.data(), kN * kD, 1, 1, 0, -1.0f, 1.0f);
    k3::fill_uniform(q.w.data(), kV * kD, 1, 2, 0, -0.05f, 0.05f);
    for (int64_t i = 0; i < kN; ++i)
      q.targets[i] = i % 16 == 15 ? kIgnore : static_cast<int32_t>((i * 7919) % kV);
    return q;
  }();
  return p;
}

void set_extra_memory(benchmark::State& state, int64_t floats) {
  state.counters["extra_MiB"] = static_cast<double>(floats) * sizeof(float) / (1 << 20);
}

void fused(benchmark::State& state) {
  Problem& p = problem();
  const int64_t chunk = state.range(0);
  std::vector<float> workspace(chunk * kV, 0.0f);
  k3::kernels::LmHeadCeArgs a;
  a.h = p.h.data();
  a.w = p.w.data();
  a.targets = p.targets.data();
  a.N = kN;
  a.d = kD;
  a.V = kV;
  a.ignore_index = kIgnore;
  a.grad_scale = 1.0f / kN;
  a.chunk = chunk;
  a.workspace = workspace.data();
  a.dh = p.dh.data();
  a.dw = p.dw.data();
  k3::bench::run_with_flop_counters(state, kFlops, [&] { k3::kernels::lm_head_cross_entropy(a); });
  set_extra_memory(state, chunk * kV);
}

void unfused(benchmark::State& state) {
  Problem& p = problem();
  std::vector<float> logits(kN * kV, 0.0f);
  k3::bench::run_with_flop_counters(state, kFlops, [&] {
    using k3::kernels::gemm;
    gemm(false, true, kN, kV, kD, 1.0f, p.h.data(), p.w.data(), 0.0f, logits.data());
    k3::kernels::cross_entropy_forward_backward(logits.data(), p.targets.data(), kN, kV, kIgnore,
                                                1.0f / kN);
    gemm(false, false, kN, kD, kV, 1.0f, logits.data(), p.w.data(), 0.0f, p.dh.data());
    gemm(true, false, kV, kD, kN, 1.0f, logits.data(), p.h.data(), 1.0f, p.dw.data());
  });
  set_extra_memory(state, kN * kV);
}

// The console output, then each fused run relative to the unfused one.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  RatioReporter() : ConsoleReporter(OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration)
        results_[r.benchmark_name()] = {r.GetAdjustedRealTime(), r.counters.at("extra_MiB").value};
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    const Result* base = nullptr;
    for (const auto& [name, r] : results_)
      if (name.find("unfused") != std::string::npos) base = &r;
    if (!base) return;
    for (const auto& [name, r] : results_)
      if (&r != base)
        std::printf("%s vs unfused: time x%.3f, extra memory x%.4f (%.0f MiB vs %.0f MiB)\n",
                    name.c_str(), r.time / base->time, r.extra_mib / base->extra_mib, r.extra_mib,
                    base->extra_mib);
  }

 private:
  struct Result {
    double time, extra_mib;
  };
  std::map<std::string, Result> results_;
};

}  // namespace

BENCHMARK(unfused)->Name("lm_head_ce/unfused")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(fused)
    ->Name("lm_head_ce/fused")
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  k3::set_num_threads();
  benchmark::Initialize(&argc, argv);
  k3::bench::fma_peak_gflops();  // measured (and printed) before the runs
  problem();
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
