// Muon's Newton-Schulz orthogonalization (5 quintic steps), k3lab against the same algorithm in
// PyTorch, both on 2 threads, side by side in one run (the host is shared and noisy: only figures
// measured together compare). Two shapes: one 4096×4096 matrix, and the per-head blocks of a K3
// attention projection, 96 heads of [128, 7168].
//
// PyTorch runs in a child process (bench/newton_schulz.py, one orthogonalization per request)
// with its own best environment: OpenBLAS on its native kernel (OPENBLAS_CORETYPE /
// OPENBLAS_L2_SIZE unset), huge pages for malloc, passive OpenMP waits. Both sides orthogonalize
// the same deterministic input. Their repetitions alternate (k3lab, PyTorch, k3lab, ...), so the
// host's drifting load falls on both alike: each side reports its median time and range, and the
// ratio is taken per pair of neighbouring repetitions (median and range of those ratios). The
// output's Frobenius norm cross-checks that they computed the same thing (to about torch's fp32
// rounding: k3lab's output is the closer one to a float64 run).
//
//   bench_newton_schulz [--warmup N] [--reps N] [--bench-dir DIR]
#include "k3/optim/newton_schulz.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "spread.h"
#include "torch_child.h"

namespace {

constexpr int kThreads = 2, kSteps = 5;

struct Case {
  const char* name;
  int64_t batch, m, n;
};
constexpr Case kCases[] = {{"4096 x 4096", 1, 4096, 4096},
                           {"96 heads x [128, 7168]", 96, 128, 7168}};

struct Options {
  int warmup = 1, reps = 5;
  std::filesystem::path bench_dir = K3_BENCH_DIR;
};

// splitmix64 of the element index, mapped to [-0.5, 0.5): newton_schulz.py draws the same values.
std::vector<float> bench_input(size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t z = i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v[i] = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) - 0.5f;
  }
  return v;
}

// k3lab's side: one orthogonalization of the bench input per call of run().
class K3Side {
 public:
  explicit K3Side(const Case& c)
      : c_(c),
        input_(bench_input(static_cast<size_t>(c.batch * c.m * c.n))),
        x_(input_.size()),
        out_(input_.size()),
        ns_(kSteps) {}
  double run() {
    std::memcpy(x_.data(), input_.data(), input_.size() * sizeof(float));  // run() overwrites x
    k3::Timer t;
    ns_.run(x_.data(), out_.data(), c_.batch, c_.m, c_.n);
    return t.seconds();
  }
  double fro2() const {
    double sum = 0;
    for (float v : out_) sum += static_cast<double>(v) * v;
    return sum;
  }

 private:
  Case c_;
  std::vector<float> input_, x_, out_;
  k3::optim::NewtonSchulz ns_;
};

// PyTorch's side: the child process, asked for one orthogonalization per run().
class TorchSide {
 public:
  TorchSide(const Case& c, const Options& o)
      : child_(k3::bench::torch_command(o.bench_dir, "newton_schulz.py", kThreads) + " --batch " +
               std::to_string(c.batch) + " --m " + std::to_string(c.m) + " --n " +
               std::to_string(c.n) + " --steps " + std::to_string(kSteps) + " --threads " +
               std::to_string(kThreads)) {
    if (child_.greeting() != "ready")
      throw std::runtime_error("the PyTorch side said: " + child_.greeting());
  }
  double run() { return number("run"); }
  double fro2() { return number("fro2"); }

 private:
  double number(const std::string& request) {
    const std::string answer = child_.request(request);
    char* end = nullptr;
    const double v = std::strtod(answer.c_str(), &end);
    if (answer.empty() || *end != '\0')
      throw std::runtime_error("the PyTorch side answered '" + answer + "' to '" + request + "'");
    return v;
  }
  k3::bench::TorchChild child_;
};

Options parse(int argc, char** argv) {
  Options o;
  for (const auto& [flag, value] :
       k3::bench::parse_flags(argc, argv, {"--warmup", "--reps", "--bench-dir"})) {
    if (flag == "--warmup") o.warmup = std::stoi(value);
    if (flag == "--reps") o.reps = std::stoi(value);
    if (flag == "--bench-dir") o.bench_dir = value;
  }
  if (o.warmup < 0 || o.reps < 1) throw std::runtime_error("--warmup must be >= 0 and --reps >= 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    k3::set_num_threads(kThreads);
    std::printf(
        "Newton-Schulz, %d steps, fp32, %d threads, %d repetitions alternating k3lab and PyTorch "
        "after %d warm-up pair(s); median [min-max]\n",
        kSteps, kThreads, o.reps, o.warmup);
    for (const Case& c : kCases) {
      K3Side ours(c);
      TorchSide torch(c, o);
      const k3::bench::Alternation times = k3::bench::alternate(
          o.warmup, o.reps, [&] { return ours.run(); }, [&] { return torch.run(); });
      const k3::bench::Spread ours_t = k3::bench::spread(times.ours),
                              torch_t = k3::bench::spread(times.torch),
                              ratio = k3::bench::spread(times.ratios);
      // FLOPs of the step-by-step form, per step: XXᵀ and (bA + cA²)X, 2m²n each, and A², 2m³.
      const double flops =
          kSteps * static_cast<double>(c.batch) * (4.0 * c.m * c.m * c.n + 2.0 * c.m * c.m * c.m);
      const double torch_fro2 = torch.fro2();
      std::printf(
          "%s\n  k3lab %s s   torch %s s   ratio %sx   %.1f GFLOP/s *   fro2 rel diff %.1e\n",
          c.name, k3::bench::spread_text(ours_t, "%.3f").c_str(),
          k3::bench::spread_text(torch_t, "%.3f").c_str(),
          k3::bench::spread_text(ratio, "%.2f").c_str(), flops / ours_t.median * 1e-9,
          std::abs(ours.fro2() - torch_fro2) / torch_fro2);
      std::printf("  ratio of each pair:");
      for (double r : times.ratios) std::printf(" %.2f", r);
      std::printf("\n");
      std::fflush(stdout);
    }
    std::printf(
        "ratio: torch time / k3lab time of one pair (> 1: k3lab faster). * FLOPs of the plain "
        "step-by-step form over k3lab's median time;\n  k3lab does fewer (symmetric products, "
        "Gram-matrix evaluation for wide blocks: newton_schulz.h).\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
