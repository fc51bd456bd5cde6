#include "k3/train/observe/expert_load.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;

class ExpertLoadTest : public ::testing::Test {
 protected:
  testing::TempDir dir_{"k3_expert_load", /*create=*/false};  // the code under test creates it
  const std::string run_dir_ = dir_.path();

  // Two MoE layers (1 and 3) of four experts, k = 2, 10 tokens.
  void append(int64_t step, int64_t skew = 0) {
    append_expert_load(run_dir_, step,
                       {{1, model::ExpertLoadStats::of({5 + skew, 5, 5, 5 - skew}, 10)},
                        {3, model::ExpertLoadStats::of({12, 8, 0, 0}, 10)}});
  }
  std::string path() const { return expert_load_path(run_dir_); }
};

TEST_F(ExpertLoadTest, WritesOneLinePerBatchAndReadsItBack) {
  append(1, 3);
  append(2);
  const auto records = read_expert_load(path());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].step, 1);
  const model::ExpertLoadStats& a = records[0].layers.at(1);
  EXPECT_EQ(a.load, (std::vector<int64_t>{8, 5, 5, 2}));
  EXPECT_EQ(a.tokens, 10);
  EXPECT_DOUBLE_EQ(a.maxvio, 0.6);  // 8 / 5 − 1
  EXPECT_EQ(records[1].layers.at(3).idle, 2);
  EXPECT_DOUBLE_EQ(records[1].layers.at(3).maxvio, 1.4);  // 12 / 5 − 1
  // The raw line carries the derived numbers too, for readers of the file.
  const std::string text = read_file(path());
  EXPECT_EQ(text.substr(0, text.find('\n')),
            R"({"step":1,"layers":{"1":{"tokens":10,"load":[8,5,5,2],"maxvio":0.6000000000000001,)"
            R"("min":2,"max":8,"idle":0},"3":{"tokens":10,"load":[12,8,0,0],"maxvio":1.4,"min":0,)"
            R"("max":12,"idle":2}}})");
}

TEST_F(ExpertLoadTest, AResumedRunReplacesTheStepsItRepeats) {
  for (int64_t s = 1; s <= 5; ++s) append(s, 1);
  // The run crashed mid-write, then resumed from its checkpoint at step 3.
  std::ofstream(path(), std::ios::app) << R"({"step":6,"layers":{"1":{"tok)";
  append(4, 2);
  const auto records = read_expert_load(path());
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records.back().step, 4);
  EXPECT_EQ(records.back().layers.at(1).load[0], 7);  // the resumed run's record
  EXPECT_EQ(records[2].layers.at(1).load[0], 6);
}

TEST_F(ExpertLoadTest, ErrorsNameTheFileAndLine) {
  try {
    read_expert_load(path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.context().file, path());
  }
  fs::create_directories(run_dir_);
  std::ofstream(path()) << R"({"step":1,"layers":{"1":{"tokens":4,"load":[2,-1]}}})"
                        << "\n";
  try {
    read_expert_load(path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.context().file, path());
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
}

TEST_F(ExpertLoadTest, Heatmaps) {
  for (int64_t s = 1; s <= 500; ++s) append(s, s % 3);
  const auto records = read_expert_load(path());
  const Heatmap m = maxvio_heatmap(records, 100);
  EXPECT_EQ(m.row_labels, (std::vector<std::string>{"1", "3"}));
  ASSERT_EQ(m.column_labels.size(), 100u);
  EXPECT_EQ(m.column_labels.front(), "1");
  EXPECT_EQ(m.column_labels.back(), "500");
  EXPECT_DOUBLE_EQ(m.values[1][0], 1.4);
  EXPECT_DOUBLE_EQ(m.values[0][0], 0.2);  // step 1: load {6, 5, 5, 4}

  const Heatmap l = layer_load_heatmap(records, 1, 1000);
  ASSERT_EQ(l.values.size(), 4u);
  ASSERT_EQ(l.values[0].size(), 500u);
  EXPECT_DOUBLE_EQ(l.values[0][1], 1.4);  // step 2: 7 / mean 5
  EXPECT_DOUBLE_EQ(l.values[3][1], 0.6);
  EXPECT_THROW(layer_load_heatmap(records, 2), Error);
  EXPECT_NE(render_heatmap(m).find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace k3::train
