// `k3lab export CHECKPOINT --out DIR [--dtype fp32|bf16] [--max-shard-size 5GB]`: a checkpoint's
// parameters and model configuration as a Hugging Face-style model folder (docs/export.md).
#include "k3/train/checkpoint/export.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "k3/apps/commands.h"

namespace k3::apps {

void add_export(CLI::App& app) {
  struct Args {
    std::string checkpoint, out, dtype = "fp32", max_shard_size = "5GB";
  };
  auto a = std::make_shared<Args>();
  auto* cmd =
      app.add_subcommand("export", "Write a checkpoint as a Hugging Face-style model folder");
  cmd->add_option("checkpoint", a->checkpoint,
                  "A run directory (its latest checkpoint) or a checkpoint directory")
      ->required();
  cmd->add_option("--out", a->out, "The folder to create (absent or empty)")->required();
  cmd->add_option(
         "--dtype", a->dtype,
         "fp32: the trained values; bf16: bf16 where the released K3 stores bf16, fp32 elsewhere")
      ->capture_default_str();
  cmd->add_option("--max-shard-size", a->max_shard_size,
                  "Split the weights into files of at most this size")
      ->capture_default_str();
  cmd->callback([a] {
    train::ExportOptions options;
    options.out_dir = a->out;
    options.dtype = train::parse_export_dtype(a->dtype);
    options.max_shard_bytes = train::parse_byte_size(a->max_shard_size);
    const train::ExportSummary s = train::export_checkpoint(a->checkpoint, options);
    std::printf(
        "exported step %lld of %s: %lld tensors, %llu bytes, in %lld weight file%s, to %s\n",
        static_cast<long long>(s.step), s.checkpoint_dir.c_str(), static_cast<long long>(s.tensors),
        static_cast<unsigned long long>(s.tensor_bytes), static_cast<long long>(s.files),
        s.files == 1 ? "" : "s", a->out.c_str());
  });
}

}  // namespace k3::apps
