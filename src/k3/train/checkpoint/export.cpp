#include "k3/train/checkpoint/export.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/log.h"
#include "k3/model/inventory.h"
#include "k3/tensor/bf16.h"
#include "k3/tensor/safetensors.h"
#include "k3/train/checkpoint/checkpoint.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// config.json: the resolved configuration plus the keys Hugging Face tools look for first.
json folder_config(const model::ModelConfig& c, DType dtype) {
  json j = model::model_config_to_json(c);
  j["architectures"] = json::array({"K3LabForCausalLM"});
  j["model_type"] = "k3lab";
  j["torch_dtype"] = dtype == DType::BF16 ? "bfloat16" : "float32";
  return j;
}

// A parameter to export: its entry in the checkpoint's weights and the dtype it is written in.
struct Exported {
  const SafetensorsEntry* from;
  DType dtype;
  uint64_t nbytes() const {
    return static_cast<uint64_t>(shape_numel(from->shape)) * dtype_size(dtype);
  }
};
using Shard = std::vector<Exported>;

// Every parameter of the model (and nothing else), in registry order, from the checkpoint's fp32
// weights, in bf16 where the released K3 stores it in bf16 and bf16 is asked for. A missing or
// misshapen one is an error naming it, before anything is written.
Shard export_plan(const model::Model& model, const TensorFile& weights, DType dtype) {
  Shard out;
  for (const model::TensorEntry& entry : model::tensor_inventory(model))
    out.push_back(
        {&weights.get(entry.name, entry.shape),
         dtype == DType::BF16 && entry.release_dtype == "bf16" ? DType::BF16 : DType::F32});
  return out;
}

// Consecutive runs of tensors of at most max_bytes each; a larger tensor gets a file alone.
std::vector<Shard> split_into_shards(const Shard& tensors, uint64_t max_bytes) {
  std::vector<Shard> shards;
  uint64_t bytes = 0;
  for (const Exported& t : tensors) {
    if (shards.empty() || bytes + t.nbytes() > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(t);
    bytes += t.nbytes();
  }
  return shards;
}

// Streams each file's tensors from the checkpoint, one at a time, through one buffer of the
// largest tensor's size (and one for the bf16 rounding of the largest that is rounded).
class ShardWriter {
 public:
  ShardWriter(const TensorFile& weights, const std::vector<Shard>& shards) : weights_(weights) {
    size_t largest = 0, largest_bf16 = 0;
    for (const Shard& shard : shards)
      for (const Exported& t : shard) {
        const auto n = static_cast<size_t>(shape_numel(t.from->shape));
        largest = std::max(largest, n);
        if (t.dtype == DType::BF16) largest_bf16 = std::max(largest_bf16, n);
      }
    values_.resize(largest);
    half_.resize(largest_bf16);
  }

  void write(const std::string& path, const Shard& shard) {
    std::vector<SafetensorsEntry> entries;
    for (const Exported& t : shard) entries.push_back({t.from->name, t.dtype, t.from->shape, 0, 0});
    SafetensorsWriter out(path, std::move(entries), {{"format", "pt"}});
    for (const Exported& t : shard) {
      weights_.read(*t.from, values_.data());
      const int64_t n = shape_numel(t.from->shape);
      if (t.dtype == DType::BF16) {
        float_to_bf16(values_.data(), half_.data(), n);
        out.write(half_.data(), t.nbytes());
      } else {
        out.write(values_.data(), t.nbytes());
      }
    }
    out.finish();
  }

 private:
  const TensorFile& weights_;
  std::vector<float> values_;
  std::vector<uint16_t> half_;
};

// The weight files and, for more than one, the index naming each tensor's file.
void write_weights(const fs::path& dir, const TensorFile& weights, const std::vector<Shard>& shards,
                   uint64_t total_bytes) {
  ShardWriter writer(weights, shards);
  if (shards.size() == 1) {
    writer.write((dir / kWeightsFile).string(), shards[0]);
    return;
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = strprintf("model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    writer.write((dir / file).string(), shards[i]);
    for (const Exported& t : shards[i]) weight_map[t.from->name] = file;
  }
  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  write_file_atomic((dir / kIndexFile).string(), index.dump(2) + "\n");
}

// Nothing is overwritten: an existing OUT must be an empty directory. Checked before the
// checkpoint is read; the final rename fails too should OUT fill up meanwhile.
void check_out_dir(const fs::path& out) {
  const ErrorContext ctx{out.string(), "--out", -1};
  if (!fs::exists(out)) return;
  K3_CHECK_CTX(fs::is_directory(out), ctx, "exists and is not a directory");
  K3_CHECK_CTX(fs::is_empty(out), ctx, "exists and is not empty: give a new or empty directory");
}

// The folder appears complete or not at all: it is written under a hidden name beside OUT and
// renamed at the end.
void write_folder(const fs::path& out, const json& config, const TensorFile& weights,
                  const std::vector<Shard>& shards, uint64_t total_bytes) {
  const ErrorContext ctx{out.string(), "--out", -1};
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  const fs::path tmp =
      parent / strprintf(".%s.tmp.%d", out.filename().c_str(), static_cast<int>(::getpid()));
  try {
    fs::create_directories(parent);
    fs::remove_all(tmp);
    fs::create_directory(tmp);
    write_file_atomic((tmp / kConfigFile).string(), config.dump(2) + "\n");
    write_weights(tmp, weights, shards, total_bytes);
    fs::rename(tmp, out);  // replaces an empty directory
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp);
    throw Error(std::string("cannot write the model folder: ") + e.code().message(), ctx);
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
}

}  // namespace

ExportSummary export_checkpoint(const std::string& checkpoint, const ExportOptions& options) {
  fs::path out = fs::path(options.out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();  // a trailing slash
  check_out_dir(out);
  ExportSummary summary;
  FoundCheckpoint found = load_newest_valid(checkpoint, CheckpointParts::model_only);
  for (const SkippedCheckpoint& s : found.skipped) log_warn("skipped checkpoint ", s.describe());
  summary.checkpoint_dir = found.dir;
  const Checkpoint& ck = found.checkpoint;
  const model::Model model(checkpoint_configs(ck, found.dir).model, /*allocate=*/false);

  const Shard tensors = export_plan(model, ck.model, options.dtype);
  for (const Exported& t : tensors) summary.tensor_bytes += t.nbytes();
  const std::vector<Shard> shards = split_into_shards(tensors, options.max_shard_bytes);
  write_folder(out, folder_config(model.config(), options.dtype), ck.model, shards,
               summary.tensor_bytes);
  summary.step = ck.manifest["step"].get<int64_t>();
  summary.tensors = static_cast<int64_t>(tensors.size());
  summary.files = static_cast<int64_t>(shards.size());
  return summary;
}

DType parse_export_dtype(const std::string& name) {
  if (name == "fp32") return DType::F32;
  if (name == "bf16") return DType::BF16;
  throw Error("expected fp32 or bf16, found '" + name + "'", ErrorContext{"", "--dtype", -1});
}

uint64_t parse_byte_size(const std::string& text) {
  static const std::pair<std::string, uint64_t> kUnits[] = {{"", 1},
                                                            {"b", 1},
                                                            {"kb", 1000},
                                                            {"mb", 1000'000},
                                                            {"gb", 1000'000'000},
                                                            {"kib", 1ull << 10},
                                                            {"mib", 1ull << 20},
                                                            {"gib", 1ull << 30}};
  const size_t digits = static_cast<size_t>(
      std::find_if(text.begin(), text.end(),
                   [](char c) { return !std::isdigit(static_cast<unsigned char>(c)); }) -
      text.begin());
  uint64_t count = 0;
  const bool number =
      digits > 0 && std::from_chars(text.data(), text.data() + digits, count).ec == std::errc();
  std::string unit = text.substr(digits);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const auto& [name, scale] : kUnits)
    if (number && count > 0 && unit == name &&
        count <= std::numeric_limits<uint64_t>::max() / scale)
      return count * scale;
  throw Error("expected a positive size such as 5GB, 200MB, 1KB or 1GiB, found '" + text + "'",
              ErrorContext{"", "--max-shard-size", -1});
}

}  // namespace k3::train
