// k3lab's training step against PyTorch's on the same dense model, batch shape and optimizer
// (zeroed gradients, forward, backward, AdamW), both on 2 threads, in one run, at both precisions:
// fp32 against fp32, and k3lab's bf16 (train.precision = "bf16") against PyTorch's bf16 autocast.
// The host is shared and its load swings within seconds, so the two sides alternate step by step:
// each k3lab step is followed by a PyTorch step at the same precision, and both medians come from
// the same stretch of time; the ratio is taken per pair of neighbouring steps. Last, a profile of
// where k3lab's bf16 step spends its time, per shape.
//
// PyTorch runs in a child process (bench/train_vs_torch.py --serve, one step per request) with
// its own environment: OpenBLAS on its native kernel (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset),
// huge pages for malloc, passive OpenMP waits. k3lab waits passively too, so neither side's idle
// threads spin while the other one runs.
//
//   bench_train_vs_torch [--warmup N] [--steps N] [--profile-steps N] [--bench-dir DIR]
//                        [--config NAME]   (only that shape, e.g. l6-d384.json)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/profile.h"
#include "k3/base/threads.h"
#include "k3/model/model.h"
#include "peak.h"
#include "spread.h"
#include "torch_child.h"
#include "train_step.h"

namespace {

constexpr int kThreads = 2;

struct Shape {
  const char* config;  // under bench/configs
  int64_t B, T;
};
constexpr Shape kShapes[] = {{"l12-d768.json", 4, 256}, {"l6-d384.json", 8, 256}};
constexpr k3::kernels::Precision kPrecisions[] = {k3::kernels::Precision::F32,
                                                  k3::kernels::Precision::BF16};

struct Options {
  int warmup = 2, steps = 9;  // PyTorch's step time swings by ±10% from step to step
  int profile_steps = 2;      // bf16 steps profiled per shape after the timed ones
  std::filesystem::path bench_dir = K3_BENCH_DIR;
  std::string config;  // empty: every shape
};

// PyTorch's side: a child process that first prints "blas <library>" once its model is built,
// then answers each "step" line with the seconds of one training step.
std::string torch_command(const std::filesystem::path& config, const Shape& s, const Options& o) {
  return k3::bench::torch_command(o.bench_dir, "train_vs_torch.py", kThreads) +
         " --serve --config " + k3::bench::quoted(config.string()) + " --batch " +
         std::to_string(s.B) + " --seq " + std::to_string(s.T) + " --threads " +
         std::to_string(kThreads);
}

// Where k3lab's bf16 step spends its time: the profile buckets (k3/base/profile.h) over `steps`
// steps, per step, as a tree: "gemm" and "gemm: operands to bf16" lie within the layers' buckets.
std::string profile_bf16(k3::bench::TrainStep& ours, const char* name, int steps) {
  if (steps < 1) return "";
  ours.step(k3::kernels::Precision::BF16);  // switching precision is not part of a step
  k3::Profile::reset();
  k3::Profile::enable(true);
  double total = 0;
  for (int i = 0; i < steps; ++i) total += ours.step(k3::kernels::Precision::BF16);
  k3::Profile::enable(false);
  std::string out = std::string("\nbf16 step profile, ") + name + ": " +
                    std::to_string(total / steps) + " s per step (" + std::to_string(steps) +
                    " steps)\n";
  out += k3::format_profile(k3::Profile::tree(), total, steps);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (const auto& [flag, value] : k3::bench::parse_flags(
           argc, argv, {"--warmup", "--steps", "--profile-steps", "--bench-dir", "--config"})) {
    if (flag == "--warmup") o.warmup = std::stoi(value);
    if (flag == "--steps") o.steps = std::stoi(value);
    if (flag == "--profile-steps") o.profile_steps = std::stoi(value);
    if (flag == "--bench-dir") o.bench_dir = value;
    if (flag == "--config") o.config = value;
  }
  if (o.warmup < 1 || o.steps < 1) throw std::runtime_error("--warmup and --steps must be >= 1");
  bool known = o.config.empty();
  for (const Shape& s : kShapes) known = known || o.config == s.config;
  if (!known) throw std::runtime_error("--config: no shape uses " + o.config);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  k3::restart_with_passive_omp_wait(argv);
  try {
    const Options o = parse(argc, argv);
    k3::set_num_threads(kThreads);
    const double fp32_peak = k3::bench::fma_peak_gflops(),
                 bf16_peak = k3::bench::bf16_peak_gflops();
    std::printf("training step, %d threads, alternating steps, median of %d after %d warm-up\n",
                kThreads, o.steps, o.warmup);
    std::printf("%-30s %5s %12s %12s %20s %10s %7s %7s\n", "shape", "prec", "k3lab tok/s",
                "torch tok/s", "ratio per step", "k3 GFLOP/s", "%fp32pk", "%bf16pk");
    std::string blas, profiles;
    for (const Shape& s : kShapes) {
      if (!o.config.empty() && o.config != s.config) continue;
      const std::filesystem::path config = o.bench_dir / "configs" / s.config;
      const k3::model::ModelConfig c = k3::model::load_model_config(config.string());
      k3::bench::TorchChild torch(torch_command(config, s, o));
      if (torch.greeting().rfind("blas ", 0) != 0)
        throw std::runtime_error("the PyTorch side said: " + torch.greeting());
      k3::bench::TrainStep ours(c, s.B, s.T, "adamw");
      char name[64];
      std::snprintf(name, sizeof name, "L%ld d%ld H%ld V%ld B%ld T%ld", long(c.num_hidden_layers),
                    long(c.hidden_size), long(c.num_attention_heads), long(c.vocab_size), long(s.B),
                    long(s.T));
      for (const k3::kernels::Precision p : kPrecisions) {
        const std::string precision = k3::kernels::precision_name(p);
        const k3::bench::Alternation times = k3::bench::alternate(
            o.warmup, o.steps, [&] { return ours.step(p); },
            [&] { return std::stod(torch.request(precision)); });
        const double tokens = static_cast<double>(s.B * s.T);
        const double ours_tps = tokens / k3::bench::spread(times.ours).median;
        const double torch_tps = tokens / k3::bench::spread(times.torch).median;
        const double gflops = ours_tps * ours.model().train_flops_per_token(s.T) / 1e9;
        std::printf("%-30s %5s %12.1f %12.1f %19sx %10.1f %6.1f%% %6.1f%%\n", name,
                    precision.c_str(), ours_tps, torch_tps,
                    k3::bench::spread_text(k3::bench::spread(times.ratios), "%.2f").c_str(), gflops,
                    100 * gflops / fp32_peak, bf16_peak > 0 ? 100 * gflops / bf16_peak : 0.0);
        std::fflush(stdout);
      }
      profiles += profile_bf16(ours, name, o.profile_steps);
      blas = torch.greeting().substr(5);
    }
    std::printf(
        "ratio per step: PyTorch's step time / k3lab's of the step before it, at the same "
        "precision, median [min-max] (> 1: k3lab faster)\n"
        "bf16: k3lab's train.precision = bf16, PyTorch's torch.autocast(\"cpu\", bfloat16)\n"
        "torch BLAS: %s\n%s",
        blas.c_str(), profiles.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
