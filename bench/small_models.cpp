// Training throughput of the small K3 models the scaling lab trains: the preset (k3-micro by
// default) scaled to each width as `k3lab sweep` scales it (sweep/shapes.h), trained as `k3lab
// train` trains it (Muon and Per-Head Muon on the matrices, AdamW on the rest), at 1 and 2
// threads. Per row: k3lab's tokens/s, its GFLOP/s as a share of the fp32 FMA peak and of the bf16
// dot-product peak measured at that thread count, and beside it the PyTorch K3 reference
// (tests/reference/k3torch.py, AdamW) on the same config and batch where it runs, the two sides'
// steps alternating (bench/spread.h). Last, per row, where k3lab's step spends its time
// (the `k3lab train --profile` buckets) over a few more steps.
//
//   bench_small_models [--sizes 64,128,256,384] [--threads 1,2] [--warmup 2] [--steps 5]
//                      [--batch 8] [--seq 128] [--preset PATH] [--torch-max-width 256]
//                      [--profile-steps 3] [--optimizer muon|adamw] [--ns-precision fp32|bf16]
//                      [--bench-dir DIR]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/fma_peak.h"
#include "k3/base/profile.h"
#include "k3/base/threads.h"
#include "k3/model/config.h"
#include "k3/sweep/shapes.h"
#include "spread.h"
#include "torch_child.h"
#include "train_step.h"

namespace {

struct Options {
  std::vector<int64_t> widths{64, 128, 256, 384};
  std::vector<int> threads{1, 2};
  int warmup = 2, steps = 5, profile_steps = 3;
  int64_t batch = 8, seq = 128, torch_max_width = 256;
  std::string optimizer = "muon";  // as k3lab train's train.optimizer
  k3::kernels::Precision ns_precision = k3::kernels::Precision::F32;  // train.ns_precision
  std::filesystem::path preset = std::filesystem::path(K3_BENCH_DIR) / "../configs/k3-micro.json";
  std::filesystem::path bench_dir = K3_BENCH_DIR;
};

template <typename T>
std::vector<T> parse_list(const std::string& flag, const std::string& text) {
  std::vector<T> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const long long v = std::stoll(text.substr(at, comma - at));
    if (v < 1) throw std::runtime_error(flag + ": every value must be >= 1, got " + text);
    out.push_back(static_cast<T>(v));
    at = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (const auto& [flag, value] :
       k3::bench::parse_flags(argc, argv,
                              {"--sizes", "--threads", "--warmup", "--steps", "--batch", "--seq",
                               "--preset", "--torch-max-width", "--profile-steps", "--bench-dir",
                               "--optimizer", "--ns-precision"})) {
    if (flag == "--sizes") o.widths = parse_list<int64_t>(flag, value);
    if (flag == "--threads") o.threads = parse_list<int>(flag, value);
    if (flag == "--warmup") o.warmup = std::stoi(value);
    if (flag == "--steps") o.steps = std::stoi(value);
    if (flag == "--batch") o.batch = std::stoll(value);
    if (flag == "--seq") o.seq = std::stoll(value);
    if (flag == "--preset") o.preset = value;
    if (flag == "--torch-max-width") o.torch_max_width = std::stoll(value);
    if (flag == "--profile-steps") o.profile_steps = std::stoi(value);
    if (flag == "--bench-dir") o.bench_dir = value;
    if (flag == "--optimizer") o.optimizer = value;
    if (flag == "--ns-precision") {
      const auto p = k3::kernels::parse_precision(value);
      if (!p) throw std::runtime_error("--ns-precision: fp32 or bf16, got " + value);
      o.ns_precision = *p;
    }
  }
  if (o.optimizer != "muon" && o.optimizer != "adamw")
    throw std::runtime_error("--optimizer: muon or adamw, got " + o.optimizer);
  if (o.warmup < 1 || o.steps < 1 || o.batch < 1 || o.seq < 1)
    throw std::runtime_error("--warmup, --steps, --batch and --seq must be >= 1");
  return o;
}

// Seconds of every bucket named NAME in the tree (a name sits under several parents: "gemm").
double bucket_seconds(const k3::ProfileNode& node, const std::string& name) {
  double s = node.name == name ? node.seconds : 0;
  for (const k3::ProfileNode& child : node.children) s += bucket_seconds(child, name);
  return s;
}

// "moe 33% kda 31% ... optimizer 17% | gemm 45%" of k3lab's steps over `steps` more steps.
std::string profile_split(k3::bench::TrainStep& ours, int steps) {
  if (steps < 1) return "";
  k3::Profile::reset();
  k3::Profile::enable(true);
  double total = 0;
  for (int i = 0; i < steps; ++i) total += ours.step(k3::kernels::Precision::F32);
  k3::Profile::enable(false);
  const k3::ProfileNode tree = k3::Profile::tree();
  std::string out;
  char part[64];
  for (const char* name : {"moe", "kda", "mla", "dense_mlp", "attn_res", "lm_head", "optimizer"}) {
    std::snprintf(part, sizeof part, "%s %.0f%% ", name, 100 * bucket_seconds(tree, name) / total);
    out += part;
  }
  std::snprintf(part, sizeof part, "| gemm %.0f%%", 100 * bucket_seconds(tree, "gemm") / total);
  return out + part;
}

std::string torch_command(const std::filesystem::path& config, int threads, const Options& o) {
  return k3::bench::torch_command(o.bench_dir, "small_models.py", threads) + " --serve --config " +
         k3::bench::quoted(config.string()) + " --batch " + std::to_string(o.batch) + " --seq " +
         std::to_string(o.seq) + " --threads " + std::to_string(threads);
}

}  // namespace

int main(int argc, char** argv) {
  k3::restart_with_passive_omp_wait(argv);
  try {
    const Options o = parse(argc, argv);
    const k3::model::ModelConfig preset = k3::model::load_model_config(o.preset.string());
    std::map<int, std::pair<double, double>> peaks;  // threads -> fp32, bf16 GFLOP/s
    for (const int t : o.threads) {
      k3::set_num_threads(t);
      peaks[t] = {k3::measure_fma_peak_gflops(t, 0.3), k3::measure_bf16_peak_gflops(t, 0.3)};
      std::printf("peaks on %d thread%s: fp32 FMA %.1f GFLOP/s, bf16 dot products %.1f GFLOP/s\n",
                  t, t == 1 ? "" : "s", peaks[t].first, peaks[t].second);
    }
    std::printf(
        "training steps of %s scaled by width, B%ld T%ld, fp32, alternating with "
        "PyTorch, median of %d after %d warm-up\n",
        o.preset.filename().c_str(), long(o.batch), long(o.seq), o.steps, o.warmup);
    std::printf("%-22s %3s %11s %7s %7s %8s %11s %18s  %s\n", "shape", "thr", "k3lab tok/s",
                "%fp32pk", "%bf16pk", "NS/model", "torch tok/s", "ratio per step",
                "k3lab step profile");
    const std::filesystem::path config_file =
        std::filesystem::temp_directory_path() / ("k3-small-" + std::to_string(getpid()) + ".json");
    std::string blas = "not run";
    for (const int64_t width : o.widths) {
      const k3::sweep::ModelShape shape = k3::sweep::scale_preset(preset, width);
      std::ofstream(config_file) << k3::model::model_config_to_json(shape.config).dump(2);
      char name[64];
      std::snprintf(name, sizeof name, "d%ld L%ld N%.0fK", long(width), long(shape.layers),
                    double(shape.params) / 1e3);
      for (const int t : o.threads) {
        k3::set_num_threads(t);
        k3::bench::TrainStep ours(shape.config, o.batch, o.seq, o.optimizer, o.ns_precision);
        const auto k3_step = [&] { return ours.step(k3::kernels::Precision::F32); };
        std::vector<double> mine, ratios, theirs;
        if (width <= o.torch_max_width) {
          k3::bench::TorchChild torch(torch_command(config_file, t, o));
          if (torch.greeting().rfind("blas ", 0) != 0)
            throw std::runtime_error("the PyTorch side said: " + torch.greeting());
          blas = torch.greeting().substr(5);
          const k3::bench::Alternation a = k3::bench::alternate(
              o.warmup, o.steps, k3_step, [&] { return std::stod(torch.request("step")); });
          mine = a.ours, theirs = a.torch, ratios = a.ratios;
        } else {
          for (int i = 0; i < o.warmup + o.steps; ++i)
            if (const double s = k3_step(); i >= o.warmup) mine.push_back(s);
        }
        const double tokens = static_cast<double>(ours.tokens());
        const double tps = tokens / k3::bench::spread(mine).median;
        const double gflops = tps * ours.model().train_flops_per_token(o.seq) / 1e9;
        const double ns_share =
            ours.muon_flops(o.optimizer) / (ours.model().train_flops_per_token(o.seq) * tokens);
        std::printf("%-22s %3d %11.0f %6.1f%% %6.1f%% %7.0f%% %11s %17s%s  %s\n", name, t, tps,
                    100 * gflops / peaks[t].first, 100 * gflops / peaks[t].second, 100 * ns_share,
                    theirs.empty()
                        ? "-"
                        : std::to_string(long(tokens / k3::bench::spread(theirs).median)).c_str(),
                    ratios.empty()
                        ? "-"
                        : k3::bench::spread_text(k3::bench::spread(ratios), "%.1f").c_str(),
                    ratios.empty() ? " " : "x", profile_split(ours, o.profile_steps).c_str());
        std::fflush(stdout);
      }
    }
    std::filesystem::remove(config_file);
    std::printf(
        "N: active matrix parameters; %%pk: k3lab's GFLOP/s (Model::train_flops_per_token) over "
        "the "
        "peak at that thread count\nratio per step: PyTorch's step time / k3lab's of the step "
        "before it, median [min-max] (> 1: k3lab faster); PyTorch's side trains with AdamW\n"
        "torch BLAS: %s\n",
        blas.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
