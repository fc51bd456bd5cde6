// k3lab's greedy generation against PyTorch's with decoding caches (bench/decode_vs_torch.py:
// the reference models of tests/reference, a KV cache for the dense models; for the K3 model, KDA's
// windows and recurrent state and MLA's latent cache) on the same model, weights and prompts (k3lab
// writes both for the PyTorch side), both on 2 threads: B prompts of P random tokens, prefilled,
// then `tokens` generated per sequence. The two sides alternate generation by generation, as in
// bench_train_vs_torch; per batch size the table gives each side's median decode tokens/s (the
// steps after the prefill), the ratio per neighbouring pair as median [min-max], and the prefill's
// tokens/s. Both sides run in fp32, then in bf16 (PyTorch under bf16 autocast, k3lab with
// bf16 matrix products, train.precision's: fp32 accumulation, the weights' bf16 copy). Last, per
// row, where one more k3lab generation's decode steps spent their time (the profile buckets).
//
// The ceiling of batch-1 decoding is the memory bandwidth: every step reads every weight a token
// passes through once (embedding row aside; of the routed experts the k of E it visits), so those
// bytes over the bandwidth bound the step time from below. The bench measures the bandwidth first
// (a streaming read, bench/peak.h) and gives, per batch-1 row, the GB/s k3lab's decode steps read
// their weights at and that as a percentage of the bandwidth on the bench's threads.
//
//   bench_decode_vs_torch [--warmup N] [--reps N] [--prompt P] [--tokens N] [--model NAME]
//                         [--bench-dir DIR]
// --model NAME runs only bench/configs/NAME (e.g. k3-l8-d384.json).
#include <unistd.h>

#include <algorithm>
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
#include "k3/base/profile.h"
#include "k3/base/threads.h"
#include "k3/kernels/gemm.h"
#include "k3/model/model.h"
#include "k3/model/sampling.h"
#include "k3/tensor/safetensors.h"
#include "k3/train/session.h"
#include "peak.h"
#include "spread.h"
#include "torch_child.h"

namespace {

constexpr int kThreads = 2;
constexpr const char* kConfigs[] = {"l6-d384.json", "k3-l8-d384.json", "l12-d768.json"};
constexpr int64_t kBatches[] = {1, 8};
constexpr const char* kPrecisions[] = {"fp32", "bf16"};

struct Options {
  int warmup = 1, reps = 5;
  int64_t prompt = 128, tokens = 64;
  std::string model;  // empty: every config
  std::filesystem::path bench_dir = K3_BENCH_DIR;
};

using Prompts = std::vector<std::vector<int32_t>>;

// B prompts of `length` random tokens.
Prompts random_prompts(int64_t B, int64_t length, int64_t vocab) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int32_t> draw(0, static_cast<int32_t>(vocab - 1));
  Prompts prompts(static_cast<size_t>(B), std::vector<int32_t>(static_cast<size_t>(length)));
  for (auto& p : prompts)
    for (int32_t& t : p) t = draw(rng);
  return prompts;
}

// What the PyTorch side reads: the model's weights (K3 names) and the prompts ([B, P] `prompts`,
// ids as floats), as safetensors files in a directory of this process, removed at its end.
class SharedFiles {
 public:
  SharedFiles()
      : dir_(std::filesystem::temp_directory_path() /
             ("k3lab-decode-vs-torch-" + std::to_string(getpid()))) {
    std::filesystem::create_directories(dir_);
  }
  ~SharedFiles() { std::filesystem::remove_all(dir_); }
  SharedFiles(const SharedFiles&) = delete;
  SharedFiles& operator=(const SharedFiles&) = delete;

  std::filesystem::path weights(const k3::model::ParamRegistry& params) const {
    k3::Safetensors file;
    for (int i = 0; i < params.size(); ++i)
      file.tensors.emplace_back(params.info(i).name, params.value(i));
    return save("weights.safetensors", file);
  }
  std::filesystem::path prompts(const Prompts& prompts) const {
    const int64_t B = static_cast<int64_t>(prompts.size()),
                  P = static_cast<int64_t>(prompts[0].size());
    k3::Tensor ids = k3::Tensor::empty({B, P});
    for (int64_t b = 0; b < B; ++b)
      std::copy_n(prompts[static_cast<size_t>(b)].begin(), P, ids.f32() + b * P);
    return save("prompts.safetensors", {{{"prompts", ids}}, {}});
  }

 private:
  std::filesystem::path save(const char* name, const k3::Safetensors& file) const {
    k3::save_safetensors((dir_ / name).string(), file);
    return dir_ / name;
  }
  std::filesystem::path dir_;
};

// k3lab's side: greedy generation from the prompts.
class K3Side {
 public:
  K3Side(k3::model::Model& model, Prompts prompts, int64_t tokens)
      : model_(model), prompts_(std::move(prompts)), tokens_(tokens) {}
  k3::model::GenerationTimes run() {
    k3::model::GenerationTimes t;
    k3::model::generate_batch(model_, arena_, prompts_, tokens_, {.temperature = 0}, -1, &t);
    return t;
  }

 private:
  k3::model::Model& model_;
  Prompts prompts_;
  int64_t tokens_;
  k3::Arena arena_ = k3::train::step_arena();
};

// Where one more generation's decode steps spend their time: ms per step in each bucket within
// "decode" (k3/base/profile.h; the mixers, the feed-forwards, Attention Residuals, the LM head) and
// in the rest of it (residual adds, norms, choosing the next token).
std::string decode_split(K3Side& ours, int64_t steps) {
  k3::Profile::reset();
  k3::Profile::enable(true);
  ours.run();
  k3::Profile::enable(false);
  const k3::ProfileNode root = k3::Profile::tree();
  const auto decode = std::find_if(root.children.begin(), root.children.end(),
                                   [](const k3::ProfileNode& n) { return n.name == "decode"; });
  if (decode == root.children.end()) throw std::runtime_error("the profile has no decode bucket");
  std::string split;
  char item[96];
  std::snprintf(item, sizeof item, "%.3f:", 1e3 * decode->seconds / steps);
  split += item;
  for (const k3::ProfileNode& c : decode->children) {
    std::snprintf(item, sizeof item, " %s %.3f,", c.name.c_str(), 1e3 * c.seconds / steps);
    split += item;
  }
  std::snprintf(item, sizeof item, " other %.3f", 1e3 * decode->own_seconds() / steps);
  return split + item;
}

std::string torch_command(const std::filesystem::path& config, const std::filesystem::path& weights,
                          const std::filesystem::path& prompts, const char* precision,
                          const Options& o) {
  return k3::bench::torch_command(o.bench_dir, "decode_vs_torch.py", kThreads) +
         " --serve --config " + k3::bench::quoted(config.string()) + " --weights " +
         k3::bench::quoted(weights.string()) + " --prompts " + k3::bench::quoted(prompts.string()) +
         " --tokens " + std::to_string(o.tokens) + " --precision " + precision + " --threads " +
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
    const double bandwidth = k3::bench::read_bandwidth_gbs();
    std::printf(
        "greedy generation, prompt %ld, %ld tokens per sequence, %d threads, alternating "
        "runs, median of %d after %d warm-up; both sides at the row's precision\n",
        long(o.prompt), long(o.tokens), kThreads, o.reps, o.warmup);
    std::printf("%-22s %5s %6s %14s %14s %20s %14s %14s %9s %9s %6s\n", "model", "batch", "dtype",
                "k3 decode t/s", "pt decode t/s", "decode ratio", "k3 prefill t/s",
                "pt prefill t/s", "MB/token", "k3 GB/s", "% bw");
    std::string blas, splits;
    const SharedFiles files;
    for (const char* name : kConfigs) {
      if (!o.model.empty() && o.model != name) continue;
      const std::filesystem::path config = o.bench_dir / "configs" / name;
      k3::model::Model model(k3::model::load_model_config(config.string()));
      model.initialize(1);
      const k3::model::ModelConfig& c = model.config();
      const std::filesystem::path weights = files.weights(model.params());
      // Values of the weights one batch-1 decode step reads.
      const double step_weights = static_cast<double>(model.matmul_params());
      char model_name[64];
      std::snprintf(model_name, sizeof model_name, "%s L%ld d%ld V%ld",
                    c.q_lora_rank > 0 ? "K3" : "dense", long(c.num_hidden_layers),
                    long(c.hidden_size), long(c.vocab_size));
      for (int64_t B : kBatches)
        for (const char* precision : kPrecisions) {
          model.set_precision(*k3::kernels::parse_precision(precision));
          const double weight_mb =
              step_weights * (std::strcmp(precision, "bf16") == 0 ? 2 : 4) / 1e6;
          Prompts prompts = random_prompts(B, o.prompt, c.vocab_size);
          k3::bench::TorchChild torch(
              torch_command(config, weights, files.prompts(prompts), precision, o));
          if (torch.greeting().rfind("blas ", 0) != 0)
            throw std::runtime_error("the PyTorch side said: " + torch.greeting());
          K3Side ours(model, std::move(prompts), o.tokens);
          std::vector<double> ours_prefill, torch_prefill;
          const k3::bench::Alternation times = k3::bench::alternate(
              o.warmup, o.reps,
              [&] {
                const k3::model::GenerationTimes t = ours.run();
                ours_prefill.push_back(t.prefill_seconds);
                return t.decode_seconds;
              },
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
                       prompted = static_cast<double>(B * o.prompt);
          const double ours_tps = decoded / k3::bench::spread(times.ours).median;
          // At batch 1 a token is a step, which reads every weight once.
          char read[32] = "        -      -";
          if (B == 1)
            std::snprintf(read, sizeof read, "%9.1f %6.0f", weight_mb * ours_tps / 1e3,
                          100 * weight_mb * ours_tps / 1e3 / bandwidth);
          std::printf("%-22s %5ld %6s %14.1f %14.1f %19sx %14.0f %14.0f %9.1f %s\n", model_name,
                      long(B), precision, ours_tps, decoded / k3::bench::spread(times.torch).median,
                      k3::bench::spread_text(k3::bench::spread(times.ratios), "%.2f").c_str(),
                      prompted / timed(ours_prefill), prompted / timed(torch_prefill), weight_mb,
                      read);
          std::fflush(stdout);
          blas = torch.greeting().substr(5);
          char row[128];
          std::snprintf(row, sizeof row, "%-22s %5ld %6s ", model_name, long(B), precision);
          splits += row + decode_split(ours, o.tokens - 1) + "\n";
        }
    }
    std::printf(
        "decode ratio: PyTorch's decode time / k3lab's of the run before it, median [min-max] (> "
        "1: k3lab faster); MB/token: weights a batch-1 decode step reads at the row's precision "
        "(of the routed experts the k of E a token visits); k3 GB/s (batch 1): MB/token x k3 "
        "decode t/s, the rate k3lab's steps read their weights at; %% bw: that over the memory "
        "read bandwidth measured on %d threads\n"
        "torch BLAS: %s\n\n"
        "k3lab's decode step in ms, from one more generation per row, profiled: the whole step, "
        "then its buckets (mixers: kda, mla, attention; feed-forwards: moe, dense_mlp; attn_res; "
        "lm_head) and the rest\n%s",
        kThreads, blas.c_str(), splits.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
