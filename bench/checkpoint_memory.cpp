// What saving and loading a checkpoint adds to resident memory (docs/runs.md): a dense model of
// about 400 MB (8 layers of d 1024, vocabulary 4096; its largest tensor 16 MiB) saved with
// save_checkpoint, then restored into a second model with load_checkpoint and restore_weights,
// and for comparison the same weight file read and decoded whole (read_file +
// decode_safetensors, what loading did before it streamed). Before each phase the kernel's peak
// counter is reset (/proc/self/clear_refs); each line gives how far the peak rose above the
// resident size at the start of the phase. The models' flat buffers are resident beforehand.
//
//   build/release/bench/bench_checkpoint_memory [--layers 8] [--dir /tmp]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "flags.h"
#include "k3/base/fs.h"
#include "k3/base/timer.h"
#include "k3/tensor/safetensors.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/session.h"
#include "resident.h"

namespace {

using namespace k3;

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Runs F with the peak counter reset; prints how far the peak rose and how long F took.
template <typename F>
void measure(const char* what, F&& f) {
  bench::reset_resident_peak();
  const auto before = static_cast<int64_t>(bench::status_bytes("VmRSS"));
  Timer t;
  f();
  std::printf("  %-44s +%7.1f MiB peak resident  %6.2f s\n", what,
              mib(static_cast<int64_t>(bench::status_bytes("VmHWM")) - before), t.seconds());
}

model::ModelConfig bench_model(int layers) {
  return model::parse_model_config({{"model_type", "k3lab_dense"},
                                    {"vocab_size", 4096},
                                    {"hidden_size", 1024},
                                    {"num_hidden_layers", layers},
                                    {"num_attention_heads", 8},
                                    {"intermediate_size", 2816},
                                    {"hidden_act", "situ"},
                                    {"tie_word_embeddings", false},
                                    {"max_position_embeddings", 1024}},
                                   "bench");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int layers = 8;
    std::string parent = std::filesystem::temp_directory_path().string();
    for (const auto& [flag, value] : bench::parse_flags(argc, argv, {"--layers", "--dir"})) {
      if (flag == "--layers")
        layers = std::stoi(value);
      else
        parent = value;
    }
    const model::ModelConfig config = bench_model(layers);
    const std::string run = parent + "/k3_checkpoint_memory." + std::to_string(::getpid());

    auto saved = train::open_session(train::RunConfig{}, config);
    saved->model->initialize(1);
    auto restored = train::open_session(train::RunConfig{}, config);
    const model::ParamRegistry& params = saved->model->params();
    int64_t largest = 0;
    for (int i = 0; i < params.size(); ++i) largest = std::max(largest, params.info(i).numel());
    std::printf("%d layers: %d tensors, %.1f MiB of weights, the largest tensor %.1f MiB\n", layers,
                params.size(), mib(params.total_numel() * 4), mib(largest * 4));

    std::string dir;
    measure("save_checkpoint", [&] {
      dir = train::save_checkpoint(run, 1,
                                   train::make_checkpoint(*saved, {}, nlohmann::json::object()));
    });
    measure("load_checkpoint + restore_weights", [&] {
      const train::Checkpoint ck = train::load_checkpoint(dir, train::CheckpointParts::model_only);
      train::restore_weights(*restored->model, ck, dir);
    });
    measure("read_file + decode_safetensors (whole file)", [&] {
      const std::string path = dir + "/model.safetensors";
      const Safetensors st = decode_safetensors(read_file(path), path);
    });
    std::printf("  model.safetensors: %.1f MiB\n",
                mib(static_cast<int64_t>(std::filesystem::file_size(dir + "/model.safetensors"))));
    const bool same = std::equal(params.values(), params.values() + params.flat_size(),
                                 restored->model->params().values());
    std::filesystem::remove_all(run);
    if (!same) throw std::runtime_error("the restored weights differ from the saved ones");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
