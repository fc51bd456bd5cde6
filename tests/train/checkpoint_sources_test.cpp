// Saving from tensor sources: each fill runs once, in order, into one reused buffer, on the writer
// and on every other rank; only the writer touches the filesystem; the files are byte for byte
// what encode_safetensors makes of the same tensors, with the manifest's sizes and checksums.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/test_util.h"
#include "k3/base/checksum.h"
#include "k3/base/fs.h"
#include "k3/tensor/safetensors.h"
#include "k3/train/checkpoint/checkpoint.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// Sources whose fills log their name and buffer, and write values that depend on name and index.
class LoggedSources {
 public:
  std::vector<TensorSource> make(const std::vector<std::pair<std::string, Shape>>& specs) {
    std::vector<TensorSource> out;
    for (const auto& [name, shape] : specs)
      out.push_back({name, shape, [this, name, n = shape_numel(shape)](float* to) {
                       filled.push_back(name);
                       buffers.push_back(to);
                       for (int64_t i = 0; i < n; ++i) to[i] = value(name, i);
                     }});
    return out;
  }
  // The tensors the fills produce, as encode_safetensors takes them.
  static Safetensors tensors(const std::vector<std::pair<std::string, Shape>>& specs) {
    Safetensors st;
    for (const auto& [name, shape] : specs) {
      Tensor t = Tensor::empty(shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = value(name, i);
      st.tensors.emplace_back(name, t);
    }
    return st;
  }
  static float value(const std::string& name, int64_t i) {
    return static_cast<float>(name.size() * 1000 + static_cast<size_t>(name[0])) +
           0.5f * static_cast<float>(i);
  }

  std::vector<std::string> filled;
  std::vector<const float*> buffers;
};

const std::vector<std::pair<std::string, Shape>> kModel = {
    {"model.layers.0.w", {3, 5}}, {"lm_head.weight", {7, 2}}, {"empty", {0, 3}}, {"scale", {}}};
const std::vector<std::pair<std::string, Shape>> kOptimizer = {{"exp_avg.w", {4}},
                                                               {"exp_avg_sq.w", {2, 2}}};
const std::vector<std::string> kOrder = {"model.layers.0.w", "lm_head.weight", "empty", "scale",
                                         "exp_avg.w",        "exp_avg_sq.w"};

CheckpointContents contents(LoggedSources& log) {
  CheckpointContents ck;
  ck.model = log.make(kModel);
  ck.optimizer = log.make(kOptimizer);
  ck.texts["config.json"] = "{}\n";
  return ck;
}

TEST(CheckpointSources, FillsRunOnceEachInOrderIntoOneBufferAndTheFilesMatchTheEncoder) {
  testing::TempDir run("k3_ck_sources");
  LoggedSources log;
  const std::string dir = save_checkpoint(run.path(), 3, contents(log));
  EXPECT_EQ(log.filled, kOrder);
  for (const float* b : log.buffers) EXPECT_EQ(b, log.buffers[0]) << "a second buffer";

  const nlohmann::json manifest = nlohmann::json::parse(read_file(dir + "/manifest.json"));
  for (const auto& [file, specs] :
       {std::pair{"model.safetensors", kModel}, std::pair{"optimizer.safetensors", kOptimizer}}) {
    const std::string bytes = read_file(dir + "/" + file);
    EXPECT_EQ(bytes, encode_safetensors(LoggedSources::tensors(specs))) << file;
    EXPECT_EQ(manifest["files"][file]["bytes"], bytes.size()) << file;
    EXPECT_EQ(manifest["files"][file]["sha256"], sha256_hex(bytes)) << file;
  }
  const Checkpoint back = load_checkpoint(dir);
  const SafetensorsEntry& w = back.model.get("lm_head.weight", {7, 2});
  std::vector<float> values(14);
  back.model.read(w, values.data());
  EXPECT_EQ(values[13], LoggedSources::value("lm_head.weight", 13));
}

// A rank that does not write runs the same fills in the same order and touches no file.
TEST(CheckpointSources, OtherRanksRunTheFillsAndWriteNothing) {
  testing::TempDir parent("k3_ck_sources");
  const std::string run_dir = parent.path() + "/run";
  LoggedSources log;
  const std::string dir = save_checkpoint(run_dir, 3, contents(log), 2, /*writer=*/false);
  EXPECT_EQ(dir, run_dir + "/checkpoints/step_00000003");
  EXPECT_EQ(log.filled, kOrder);
  EXPECT_FALSE(fs::exists(run_dir));
}

// The writer's filesystem failing does not stop its fills, which other ranks are matching.
TEST(CheckpointSources, AWriterThatCannotWriteStillRunsEveryFill) {
  testing::TempDir parent("k3_ck_sources");
  const std::string run_dir = parent.file("not_a_directory", "x");
  LoggedSources log;
  const std::string msg = error_of([&] { save_checkpoint(run_dir, 3, contents(log)); });
  EXPECT_NE(msg.find("cannot write checkpoint"), std::string::npos) << msg;
  EXPECT_EQ(log.filled, kOrder);
}

// What every rank can check is checked before the first fill, on every rank alike.
TEST(CheckpointSources, BadContentsAreRefusedBeforeAnyFill) {
  testing::TempDir run("k3_ck_sources");
  for (bool writer : {true, false}) {
    LoggedSources log;
    CheckpointContents twice = contents(log);
    twice.optimizer.push_back(twice.optimizer[0]);
    EXPECT_NE(error_of([&] {
                save_checkpoint(run.path(), 1, twice, 2, writer);
              }).find("two tensors have this name"),
              std::string::npos);
    CheckpointContents clash = contents(log);
    clash.texts["model.safetensors"] = "";
    EXPECT_NE(error_of([&] { save_checkpoint(run.path(), 1, clash, 2, writer); }).find("clashes"),
              std::string::npos);
    EXPECT_TRUE(log.filled.empty()) << "writer " << writer;
  }
  EXPECT_TRUE(list_checkpoints(run.path()).empty());
}

}  // namespace
}  // namespace k3::train
