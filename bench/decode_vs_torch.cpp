// k3lab's greedy generation against PyTorch's with a KV cache (bench/decode_vs_torch.py) on the
// same dense model, both on 2 threads: B prompts of P random tokens, prefilled, then `tokens`
// generated per sequence. The two sides alternate generation by generation, as in
// bench_train_vs_torch; per batch size the table gives each side's median decode tokens/s (the
// steps after the prefill), the ratio per neighbouring pair as median [min-max], and the prefill's
// tokens/s. Both sides run in fp32, then in bf16 (PyTorch under bf16 autocast, k3lab with
// bf16 matrix products, train.precision's: fp32 accumulation, the weights' bf16 copy).
//
// The ceiling of batch-1 decoding is the memory bandwidth: every step reads every weight once
// (embedding row aside), so the weights' bytes over the bandwidth bound the step time from below.
//
//   bench_decode_vs_torch [--warmup N] [--reps N] [--prompt P] [--tokens N] [--model NAME]
//                         [--bench-dir DIR]
// --model NAME runs only bench/configs/NAME (e.g. l6-d384.json).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/arena.h"
#include "k3/base/threads.h"
#include "k3/kernels/gemm.h"
#include "k3/model/model.h"
#include "k3/model/sampling.h"
#include "k3/train/session.h"
#include "spread.h"
#include "torch_child.h"

namespace {

constexpr int kThreads = 2;
constexpr const char* kConfigs[] = {"l6-d384.json", "l12-d768.json"};
constexpr int64_t kBatches[] = {1, 8};
constexpr const char* kPrecisions[] = {"fp32", "bf16"};

struct Options {
  int warmup = 1, reps = 5;
  int64_t prompt = 128, tokens = 64;
  std::string model;  // empty: every config
  std::filesystem::path bench_dir = K3_BENCH_DIR;
};

// k3lab's side: B random prompts, generated from greedily.
class K3Side {
 public:
  K3Side(k3::model::Model& model, int64_t B, const Options& o) : model_(model), tokens_(o.tokens) {
    std::mt19937 rng(2);
    std::uniform_int_distribution<int32_t> draw(
        0, static_cast<int32_t>(model.config().vocab_size - 1));
    prompts_.assign(static_cast<size_t>(B), std::vector<int32_t>(static_cast<size_t>(o.prompt)));
    for (auto& p : prompts_)
      for (int32_t& t : p) t = draw(rng);
  }
  // Decode seconds; the prefill's go to prefill_seconds.
  double run() {
    k3::model::GenerationTimes t;
    k3::model::generate_batch(model_, arena_, prompts_, tokens_, {.temperature = 0}, -1, &t);
    prefill_seconds.push_back(t.prefill_seconds);
    return t.decode_seconds;
  }
  std::vector<double> prefill_seconds;

 private:
  k3::model::Model& model_;
  int64_t tokens_;
  std::vector<std::vector<int32_t>> prompts_;
  k3::Arena arena_ = k3::train::step_arena();
};

std::string torch_command(const std::filesystem::path& config, int64_t B, const char* precision,
                          const Options& o) {
  return k3::bench::torch_command(o.bench_dir, "decode_vs_torch.py", kThreads) +
         " --serve --config " + k3::bench::quoted(config.string()) + " --batch " +
         std::to_string(B) + " --prompt " + std::to_string(o.prompt) + " --tokens " +
         std::to_string(o.tokens) + " --precision " + precision + " --threads " +
         std::to_string(kThreads);
}

Options parse(int argc, char** argv) {
  Options o;
  for (const auto& [flag, value] : k3::bench::parse_flags(
           argc, argv, {"--warmup", "--reps", "--prompt", "--tokens", "--model", "--bench-dir"})) {
    if (flag == "--warmup") o.warmup = std::stoi(value);
    if (flag == "--reps") o.reps = std::stoi(value);
    if (flag == "--prompt") o.prompt = std::stoll(value);
    if (flag == "--tokens") o.tokens = std::stoll(value);
    if (flag == "--model") o.model = value;
    if (flag == "--bench-dir") o.bench_dir = value;
  }
  if (o.warmup < 0 || o.reps < 1 || o.prompt < 1 || o.tokens < 2)
    throw std::runtime_error("expected --warmup >= 0, --reps >= 1, --prompt >= 1, --tokens >= 2");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  k3::restart_with_passive_omp_wait(argv);
  try {
    const Options o = parse(argc, argv);
    k3::set_num_threads(kThreads);
    std::printf(
        "greedy generation, prompt %ld, %ld tokens per sequence, %d threads, alternating "
        "runs, median of %d after %d warm-up; both sides at the row's precision\n",
        long(o.prompt), long(o.tokens), kThreads, o.reps, o.warmup);
    std::printf("%-22s %5s %6s %14s %14s %20s %14s %14s %9s\n", "model", "batch", "dtype",
                "k3 decode t/s", "pt decode t/s", "decode ratio", "k3 prefill t/s",
                "pt prefill t/s", "MB/token");
    std::string blas;
    for (const char* name : kConfigs) {
      if (!o.model.empty() && o.model != name) continue;
      const std::filesystem::path config = o.bench_dir / "configs" / name;
      k3::model::Model model(k3::model::load_model_config(config.string()));
      model.initialize(1);
      const k3::model::ModelConfig& c = model.config();
      // Values of the weights one decode step reads: all but the embedding table.
      const double weights =
          static_cast<double>(model.params().flat_size() - c.vocab_size * c.hidden_size);
      for (int64_t B : kBatches)
        for (const char* precision : kPrecisions) {
          model.set_precision(*k3::kernels::parse_precision(precision));
          const double weight_mb = weights * (std::strcmp(precision, "bf16") == 0 ? 2 : 4) / 1e6;
          k3::bench::TorchChild torch(torch_command(config, B, precision, o));
          if (torch.greeting().rfind("blas ", 0) != 0)
            throw std::runtime_error("the PyTorch side said: " + torch.greeting());
          K3Side ours(model, B, o);
          std::vector<double> torch_prefill;
          const k3::bench::Alternation times = k3::bench::alternate(
              o.warmup, o.reps, [&] { return ours.run(); },
              [&] {
                std::istringstream answer(torch.request("run"));
                double prefill = 0, decode = 0;
                answer >> prefill >> decode;
                torch_prefill.push_back(prefill);
                return decode;
              });
          // The prefills of the timed runs (the warm-up's dropped).
          auto timed = [&](const std::vector<double>& v) {
            return k3::bench::spread({v.begin() + o.warmup, v.end()}).median;
          };
          const double decoded = static_cast<double>(B * (o.tokens - 1)),
                       prompts = static_cast<double>(B * o.prompt);
          char model_name[64];
          std::snprintf(model_name, sizeof model_name, "L%ld d%ld V%ld", long(c.num_hidden_layers),
                        long(c.hidden_size), long(c.vocab_size));
          std::printf("%-22s %5ld %6s %14.1f %14.1f %19sx %14.0f %14.0f %9.1f\n", model_name,
                      long(B), precision, decoded / k3::bench::spread(times.ours).median,
                      decoded / k3::bench::spread(times.torch).median,
                      k3::bench::spread_text(k3::bench::spread(times.ratios), "%.2f").c_str(),
                      prompts / timed(ours.prefill_seconds), prompts / timed(torch_prefill),
                      weight_mb);
          std::fflush(stdout);
          blas = torch.greeting().substr(5);
        }
    }
    std::printf(
        "decode ratio: PyTorch's decode time / k3lab's of the run before it, median [min-max] (> "
        "1: k3lab faster); MB/token: weights read per decode step at the row's precision\n"
        "torch BLAS: %s\n",
        blas.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
