#include "k3/train/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  std::string run_dir() const { return dir_.path(); }

  // A small checkpoint whose values depend on STEP, so checkpoints can be told apart.
  static CheckpointContents make(int64_t step) {
    CheckpointContents ck;
    Tensor w = Tensor::empty({3, 4});
    for (int i = 0; i < 12; ++i) w.f32()[i] = static_cast<float>(step * 100 + i);
    Tensor m = Tensor::zeros({3, 4});
    m.f32()[5] = 0.5f;
    ck.model = tensor_sources({{"model.embed_tokens.weight", w}});
    ck.optimizer = tensor_sources({{"model.embed_tokens.weight.exp_avg", m}});
    ck.manifest = {{"data_cursor", step * 7}, {"rng", {{"seed", 1234}}}};
    ck.texts["config.json"] = "{\"step\": " + std::to_string(step) + "}\n";
    return ck;
  }

  static void expect_error_mentions(const std::string& step_dir, const std::string& file,
                                    const std::string& what) {
    try {
      load_checkpoint(step_dir);
      FAIL() << "expected an error about " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.context().file, step_dir + "/" + file) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }

 private:
  testing::TempDir dir_{"k3_checkpoint"};
};

TEST_F(CheckpointTest, RoundTrip) {
  const std::string dir = save_checkpoint(run_dir(), 123, make(123));
  EXPECT_EQ(dir, run_dir() + "/checkpoints/step_00000123");

  Checkpoint loaded = load_checkpoint(dir);
  ASSERT_EQ(loaded.model.entries().size(), 1u);
  EXPECT_EQ(loaded.model.entries()[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(loaded.model.entries()[0].shape, (Shape{3, 4}));
  EXPECT_EQ(loaded.model.tensor(loaded.model.entries()[0]).f32()[11], 12311.f);
  ASSERT_EQ(loaded.optimizer.entries().size(), 1u);
  EXPECT_EQ(loaded.optimizer.tensor(loaded.optimizer.entries()[0]).f32()[5], 0.5f);
  EXPECT_EQ(loaded.manifest["data_cursor"], 861);
  EXPECT_EQ(loaded.manifest["rng"]["seed"], 1234);
  EXPECT_EQ(loaded.manifest["step"], 123);
  EXPECT_EQ(loaded.manifest["format_version"], kCheckpointFormatVersion);
  EXPECT_EQ(loaded.manifest["files"]["model.safetensors"]["bytes"],
            fs::file_size(dir + "/model.safetensors"));
  EXPECT_EQ(loaded.texts.at("config.json"), "{\"step\": 123}\n");
  EXPECT_EQ(read_file(dir + "/config.json"), "{\"step\": 123}\n");
  EXPECT_EQ(load_newest_valid(run_dir(), CheckpointParts::everything).dir, dir);
  EXPECT_EQ(load_newest_valid(dir, CheckpointParts::everything).dir, dir);
}

TEST_F(CheckpointTest, ModelOnlyLoadsNeedNoOptimizerState) {
  const std::string dir = save_checkpoint(run_dir(), 3, make(3));
  fs::remove(dir + "/optimizer.safetensors");
  Checkpoint model_only = load_checkpoint(dir, CheckpointParts::model_only);
  EXPECT_EQ(model_only.model.entries().size(), 1u);
  EXPECT_TRUE(model_only.optimizer.entries().empty());
  EXPECT_EQ(model_only.optimizer.path(), "");
  expect_error_mentions(dir, "optimizer.safetensors", "missing");
}

TEST_F(CheckpointTest, TextFilesAreVerified) {
  const std::string dir = save_checkpoint(run_dir(), 4, make(4));
  write_file_atomic(dir + "/config.json", "{\"step\": 5}\n");
  expect_error_mentions(dir, "config.json", "checksum mismatch");
  CheckpointContents clash = make(4);
  clash.texts["manifest.json"] = "{}";
  EXPECT_THROW(save_checkpoint(run_dir(), 6, clash), Error);
}

TEST_F(CheckpointTest, EditedManifestStepIsNamed) {
  const std::string dir = save_checkpoint(run_dir(), 7, make(7));
  std::string manifest = read_file(dir + "/manifest.json");
  const std::string from = "\"step\": 7";
  ASSERT_NE(manifest.find(from), std::string::npos);
  manifest.replace(manifest.find(from), from.size(), "\"step\": 70");
  write_file_atomic(dir + "/manifest.json", manifest);
  try {
    load_checkpoint(dir);
    FAIL() << "an edited step was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.context().field, "step") << e.what();
    EXPECT_NE(std::string(e.what()).find("expected 7"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, SavingTheSameStepAgainReplacesIt) {
  save_checkpoint(run_dir(), 5, make(5));
  CheckpointContents again = make(5);
  again.manifest["data_cursor"] = -1;
  const std::string dir = save_checkpoint(run_dir(), 5, again);
  EXPECT_EQ(load_checkpoint(dir).manifest["data_cursor"], -1);
  EXPECT_EQ(list_checkpoints(run_dir()).size(), 1u);
}

TEST_F(CheckpointTest, TruncatedFileIsNamed) {
  const std::string dir = save_checkpoint(run_dir(), 1, make(1));
  const std::string path = dir + "/model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 10);
  expect_error_mentions(dir, "model.safetensors", "size mismatch");
}

TEST_F(CheckpointTest, FlippedBitIsDetected) {
  const std::string dir = save_checkpoint(run_dir(), 1, make(1));
  const std::string path = dir + "/optimizer.safetensors";
  std::string bytes = read_file(path);
  bytes[bytes.size() - 3] ^= 0x10;
  write_file_atomic(path, bytes);
  expect_error_mentions(dir, "optimizer.safetensors", "checksum mismatch");
}

TEST_F(CheckpointTest, MissingFileAndMalformedManifest) {
  const std::string dir = save_checkpoint(run_dir(), 1, make(1));
  fs::remove(dir + "/model.safetensors");
  expect_error_mentions(dir, "model.safetensors", "missing");

  write_file_atomic(dir + "/manifest.json", "{\"step\": 1, \"files\": ");
  expect_error_mentions(dir, "manifest.json", "malformed JSON");

  fs::remove(dir + "/manifest.json");
  expect_error_mentions(dir, "manifest.json", "missing");
}

TEST_F(CheckpointTest, PreviousCheckpointSurvivesCorruptionOfTheNewest) {
  save_checkpoint(run_dir(), 10, make(10));
  const std::string newest = save_checkpoint(run_dir(), 20, make(20));
  std::string bytes = read_file(newest + "/model.safetensors");
  bytes[100] ^= 1;
  write_file_atomic(newest + "/model.safetensors", bytes);
  EXPECT_THROW(load_checkpoint(newest), Error);

  // The newest valid one is found, and what was skipped is said.
  FoundCheckpoint found = load_newest_valid(run_dir(), CheckpointParts::everything);
  EXPECT_EQ(found.checkpoint.manifest["step"], 10);
  const TensorFile& weights = found.checkpoint.model;
  EXPECT_EQ(weights.tensor(weights.get("model.embed_tokens.weight", {3, 4})).f32()[0], 1000.f);
  ASSERT_EQ(found.skipped.size(), 1u);
  EXPECT_NE(found.skipped[0].describe().find(newest), std::string::npos);
  EXPECT_NE(found.skipped[0].describe().find("checksum"), std::string::npos)
      << found.skipped[0].describe();
  // Given as a step directory, the corrupt one is an error, not a fallback.
  EXPECT_THROW(load_newest_valid(newest, CheckpointParts::everything), Error);
}

TEST_F(CheckpointTest, CallerChecksCanRejectACheckpoint) {
  save_checkpoint(run_dir(), 10, make(10));
  save_checkpoint(run_dir(), 20, make(20));
  auto cursor_below_100 = [](const Checkpoint& ck, const std::string&) {
    K3_CHECK(ck.manifest["data_cursor"].get<int>() < 100, "cursor too far");
  };
  FoundCheckpoint found =
      load_newest_valid(run_dir(), CheckpointParts::model_only, cursor_below_100);
  EXPECT_EQ(found.checkpoint.manifest["step"], 10);
  ASSERT_EQ(found.skipped.size(), 1u);
  EXPECT_NE(found.skipped[0].describe().find("cursor too far"), std::string::npos);
  auto reject_all = [](const Checkpoint&, const std::string&) { throw Error("unfit"); };
  try {
    load_newest_valid(run_dir(), CheckpointParts::model_only, reject_all);
    FAIL() << "expected no usable checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 skipped"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, InterruptedWritesAreIgnored) {
  const std::string done = save_checkpoint(run_dir(), 100, make(100));
  // A crash while writing step 200: a half-filled temporary directory and a stray temp file.
  const std::string root = run_dir() + "/checkpoints";
  fs::create_directories(root + "/.tmp.step_00000200.999");
  std::ofstream(root + "/.tmp.step_00000200.999/model.safetensors") << "partial";
  EXPECT_EQ(load_newest_valid(run_dir(), CheckpointParts::everything).dir, done);
  EXPECT_EQ(list_checkpoints(run_dir()), std::vector<std::string>{done});

  // The owner clears what the crash left behind (so does the next save).
  EXPECT_EQ(remove_unfinished_saves(run_dir()), 1);
  EXPECT_FALSE(fs::exists(root + "/.tmp.step_00000200.999"));
  EXPECT_TRUE(fs::exists(done));
}

TEST_F(CheckpointTest, KeepLastPrunesOldest) {
  for (int64_t step : {1, 2, 3, 4}) save_checkpoint(run_dir(), step * 10, make(step), 2);
  const std::vector<std::string> all = list_checkpoints(run_dir());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(fs::path(all[0]).filename(), "step_00000040");
  EXPECT_EQ(fs::path(all[1]).filename(), "step_00000030");

  save_checkpoint(run_dir(), 50, make(5), 0);  // 0 keeps everything
  EXPECT_EQ(list_checkpoints(run_dir()).size(), 3u);
}

TEST_F(CheckpointTest, KeepLastAlwaysKeepsTheOneJustWritten) {
  save_checkpoint(run_dir(), 100, make(1));
  save_checkpoint(run_dir(), 200, make(2));
  // Resumed from step 100 and saving step 150: step 200 belongs to the abandoned continuation.
  const std::string dir = save_checkpoint(run_dir(), 150, make(3), 1);
  EXPECT_EQ(list_checkpoints(run_dir()), std::vector<std::string>{dir});
}

TEST_F(CheckpointTest, NothingToFind) {
  EXPECT_THROW(load_newest_valid(run_dir(), CheckpointParts::everything), Error);
  EXPECT_THROW(load_newest_valid(run_dir() + "/does-not-exist", CheckpointParts::everything),
               Error);
  EXPECT_TRUE(list_checkpoints(run_dir()).empty());
}

}  // namespace
}  // namespace k3::train
