// k3lab's training step against PyTorch's on the same dense model, batch shape and optimizer
// (zeroed gradients, forward, backward, AdamW), both on 2 threads, in one run. The host is shared
// and its load swings within seconds, so the two sides alternate step by step: each k3lab step is
// followed by a PyTorch step, and both medians come from the same stretch of time.
//
// PyTorch runs in a child process (bench/train_vs_torch.py --serve, one step per request) with
// its own environment: OpenBLAS on its native kernel (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset),
// huge pages for malloc, passive OpenMP waits. k3lab waits passively too, so neither side's idle
// threads spin while the other one runs.
//
//   bench_train_vs_torch [--warmup N] [--steps N] [--bench-dir DIR]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "flags.h"
#include "k3/base/arena.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "k3/model/model.h"
#include "k3/optim/adamw.h"
#include "k3/train/optim_adapters.h"
#include "k3/train/session.h"

namespace {

constexpr int kThreads = 2;

struct Shape {
  const char* config;  // under bench/configs
  int64_t B, T;
};
constexpr Shape kShapes[] = {{"l12-d768.json", 4, 256}, {"l6-d384.json", 8, 256}};

struct Options {
  int warmup = 2, steps = 9;  // PyTorch's step time swings by ±10% from step to step
  std::filesystem::path bench_dir = std::filesystem::path(__FILE__).parent_path();
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A pause between the two sides' steps: OpenBLAS's idle threads spin for up to ~0.1 s after the
// last call, and must not eat into the k3lab step that follows.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

// k3lab's side: the model, a random batch whose targets are the next tokens, the optimizer.
class K3Side {
 public:
  K3Side(const k3::model::ModelConfig& c, const Shape& s)
      : model_(c),
        opt_(k3::train::param_set(model_.params()),
             k3::optim::AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f}) {
    model_.initialize(1);
    std::mt19937 rng(2);
    std::uniform_int_distribution<int32_t> draw(0, static_cast<int32_t>(c.vocab_size - 1));
    std::vector<int32_t> row(static_cast<size_t>(s.T + 1));
    for (int64_t b = 0; b < s.B; ++b) {
      for (int32_t& t : row) t = draw(rng);
      tokens_.insert(tokens_.end(), row.begin(), row.end() - 1);
      targets_.insert(targets_.end(), row.begin() + 1, row.end());
    }
    batch_ = {tokens_.data(), targets_.data(), s.B, s.T};
  }

  double step() {
    k3::Timer timer;
    model_.params().zero_grads();
    model_.forward_backward(arena_, acts_, batch_, 1.0f / static_cast<float>(batch_.B * batch_.T));
    opt_.step(1e-3f, 1.0f);
    return timer.seconds();
  }
  const k3::model::Model& model() const { return model_; }

 private:
  k3::model::Model model_;
  k3::optim::AdamW opt_;
  std::vector<int32_t> tokens_, targets_;
  k3::model::TokenBatch batch_;
  k3::Arena arena_ = k3::train::step_arena();  // the warm-up steps fault in what a step uses
  k3::activation::ActivationManager acts_;
};

// PyTorch's side: a child process that first prints "blas <library>" once its model is built,
// then answers each "step" line with the seconds of one training step.
class TorchSide {
 public:
  TorchSide(const std::filesystem::path& config, const Shape& s, const Options& o) {
    const std::string cmd = k3::bench::torch_command(o.bench_dir, "train_vs_torch.py", kThreads) +
                            " --serve --config " + k3::bench::quoted(config.string()) +
                            " --batch " + std::to_string(s.B) + " --seq " + std::to_string(s.T) +
                            " --threads " + std::to_string(kThreads);
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(to_child[0], STDIN_FILENO);
      dup2(from_child[1], STDOUT_FILENO);
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    const std::string first = read_line();
    if (first.rfind("blas ", 0) != 0) throw std::runtime_error("the PyTorch side said: " + first);
    blas_ = first.substr(5);
  }
  ~TorchSide() {
    std::fclose(in_);  // end of input: the child exits
    std::fclose(out_);
    waitpid(pid_, nullptr, 0);
  }
  TorchSide(const TorchSide&) = delete;
  TorchSide& operator=(const TorchSide&) = delete;

  double step() {
    std::fputs("step\n", in_);
    std::fflush(in_);
    return std::stod(read_line());
  }
  const std::string& blas() const { return blas_; }

 private:
  std::string read_line() {
    char line[4096];
    if (!std::fgets(line, sizeof line, out_)) throw std::runtime_error("the PyTorch side exited");
    return std::string(line, strcspn(line, "\n"));
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  std::string blas_;
};

Options parse(int argc, char** argv) {
  Options o;
  for (const auto& [flag, value] :
       k3::bench::parse_flags(argc, argv, {"--warmup", "--steps", "--bench-dir"})) {
    if (flag == "--warmup") o.warmup = std::stoi(value);
    if (flag == "--steps") o.steps = std::stoi(value);
    if (flag == "--bench-dir") o.bench_dir = value;
  }
  if (o.warmup < 1 || o.steps < 1) throw std::runtime_error("--warmup and --steps must be >= 1");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  // libgomp reads its wait policy once, at load: restart with the passive one.
  if (const char* p = std::getenv("OMP_WAIT_POLICY"); !p || std::strcmp(p, "passive") != 0) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);
  }
  std::signal(SIGPIPE, SIG_IGN);  // a PyTorch side that died is reported, not fatal
  try {
    const Options o = parse(argc, argv);
    k3::set_num_threads(kThreads);
    std::printf("training step, %d threads, alternating steps, median of %d after %d warm-up\n",
                kThreads, o.steps, o.warmup);
    std::printf("%-32s %12s %12s %8s %10s\n", "shape", "k3lab tok/s", "torch tok/s", "ratio",
                "k3 GFLOP/s");
    std::string blas;
    for (const Shape& s : kShapes) {
      const std::filesystem::path config = o.bench_dir / "configs" / s.config;
      const k3::model::ModelConfig c = k3::model::load_model_config(config.string());
      TorchSide torch(config, s, o);
      K3Side ours(c, s);
      std::vector<double> ours_s, torch_s;
      for (int step = 0; step < o.warmup + o.steps; ++step) {
        const double a = ours.step();
        settle();
        const double b = torch.step();
        settle();
        if (step < o.warmup) continue;
        ours_s.push_back(a);
        torch_s.push_back(b);
      }
      const double tokens = static_cast<double>(s.B * s.T);
      const double ours_tps = tokens / median(ours_s), torch_tps = tokens / median(torch_s);
      char name[64];
      std::snprintf(name, sizeof name, "L%ld d%ld H%ld V%ld B%ld T%ld", long(c.num_hidden_layers),
                    long(c.hidden_size), long(c.num_attention_heads), long(c.vocab_size), long(s.B),
                    long(s.T));
      std::printf("%-32s %12.1f %12.1f %7.2fx %10.1f\n", name, ours_tps, torch_tps,
                  ours_tps / torch_tps, ours_tps * ours.model().train_flops_per_token(s.T) / 1e9);
      std::fflush(stdout);
      blas = torch.blas();
    }
    std::printf("torch BLAS: %s\n", blas.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
