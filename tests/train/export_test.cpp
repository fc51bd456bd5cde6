#include "k3/train/checkpoint/export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

using testing::error_of;

TEST(ExportTest, ByteSizesInDecimalAndBinaryUnits) {
  EXPECT_EQ(parse_byte_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(parse_byte_size("200MB"), 200'000'000u);
  EXPECT_EQ(parse_byte_size("1KB"), 1000u);
  EXPECT_EQ(parse_byte_size("3kb"), 3000u);
  EXPECT_EQ(parse_byte_size("64KiB"), 65536u);
  EXPECT_EQ(parse_byte_size("2MiB"), 2u << 20);
  EXPECT_EQ(parse_byte_size("1GiB"), 1u << 30);
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("7B"), 7u);
  for (const char* bad : {"", "GB", "0", "0KB", "1.5GB", "-1MB", "5 GB", "5XB", "99999999999999GiB",
                          "99999999999999999999"}) {
    const std::string msg = error_of([&] { parse_byte_size(bad); });
    EXPECT_NE(msg.find("field --max-shard-size: expected a positive size"), std::string::npos)
        << "'" << bad << "': " << msg;
  }
}

TEST(ExportTest, DtypeNames) {
  EXPECT_EQ(parse_export_dtype("fp32"), DType::F32);
  EXPECT_EQ(parse_export_dtype("bf16"), DType::BF16);
  EXPECT_NE(
      error_of([] { parse_export_dtype("float16"); }).find("field --dtype: expected fp32 or bf16"),
      std::string::npos);
}

// A checkpoint whose weights lack a parameter is refused, naming the file and the tensor; no
// folder is created.
TEST(ExportTest, MissingParameterIsNamedAndNothingIsWritten) {
  testing::TempDir run("k3_export");
  const model::ModelConfig config =
      model::load_model_config(testing::source_dir() + "/configs/dense-tiny.json");
  auto session = open_session(RunConfig{}, config);
  session->model->initialize(7);
  CheckpointContents ck = make_checkpoint(*session, {}, nlohmann::json::object());
  const std::string dropped = ck.model[3].name;
  ck.model.erase(ck.model.begin() + 3);
  const std::string step_dir = save_checkpoint(run.path(), 1, ck);

  ExportOptions options;
  options.out_dir = run.path() + "/hf";
  const std::string msg = error_of([&] { export_checkpoint(run.path(), options); });
  EXPECT_NE(
      msg.find("file " + step_dir + "/model.safetensors, field " + dropped + ": tensor is missing"),
      std::string::npos)
      << msg;
  EXPECT_FALSE(std::filesystem::exists(options.out_dir));
}

}  // namespace
}  // namespace k3::train
