// Export of a training checkpoint as a Hugging Face-style model folder (docs/export.md):
// config.json (the model configuration) and the parameters, by their K3 names, in
// model.safetensors, or, above the shard size, in model-0000i-of-0000N.safetensors files listed
// by model.safetensors.index.json. Only parameters are written: the Quantile Balancing ranges and
// the optimizer state stay in the checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "k3/tensor/dtype.h"

namespace k3::train {

struct ExportOptions {
  std::string out_dir;  // must not exist, or be an empty directory
  // F32 keeps the trained values; BF16 rounds the tensors the released K3 stores in bf16 and
  // keeps those it stores in fp32.
  DType dtype = DType::F32;
  uint64_t max_shard_bytes =
      5'000'000'000;  // tensor bytes per file (one larger tensor: a file alone)
};

struct ExportSummary {
  std::string checkpoint_dir;  // the step directory exported
  int64_t step = 0;
  int64_t tensors = 0, files = 0;
  uint64_t tensor_bytes = 0;  // the index's total_size
};

// CHECKPOINT is a run directory (its latest checkpoint) or a step directory.
ExportSummary export_checkpoint(const std::string& checkpoint, const ExportOptions& options);

// "fp32" or "bf16"; throws naming --dtype otherwise.
DType parse_export_dtype(const std::string& name);
// "5GB", "200MB", "1KB" (powers of 1000), "1GiB", "64KiB" (powers of 1024), or a plain byte
// count; throws naming --max-shard-size otherwise.
uint64_t parse_byte_size(const std::string& text);

}  // namespace k3::train
