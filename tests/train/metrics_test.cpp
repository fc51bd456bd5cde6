#include "k3/train/observe/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::train {
namespace {

class MetricsTest : public ::testing::Test {
 protected:
  testing::TempDir dir_{"k3_metrics", /*create=*/false};  // the code under test creates it
  const std::string run_dir_ = dir_.path();

  void write_steps(MetricsWriter& w, int64_t first, int64_t last) {
    for (int64_t s = first; s <= last; ++s) w.write({{"step", s}, {"loss", 10.0 / s}});
  }
};

TEST_F(MetricsTest, WritesOneObjectPerLineAndReadsColumns) {
  MetricsWriter w(run_dir_);
  w.write({{"event", "start"}});
  w.write({{"step", 1}, {"loss", 2.5}, {"lr", 1e-3}});
  w.write({{"step", 2}, {"loss", NAN}, {"lr", 2e-3}, {"note", "text is not a column"}});
  w.write({{"step", 2}, {"val_loss", 2.75}});
  EXPECT_EQ(read_file(w.path()).substr(0, 18), "{\"event\":\"start\"}\n");

  auto m = read_metrics(w.path());
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m["loss"].steps, (std::vector<double>{1, 2}));
  EXPECT_EQ(m["loss"].values[0], 2.5);
  EXPECT_TRUE(std::isnan(m["loss"].values[1]));
  EXPECT_EQ(m["lr"].values, (std::vector<double>{1e-3, 2e-3}));
  EXPECT_EQ(m["val_loss"].steps, (std::vector<double>{2}));
  EXPECT_THROW(w.write(nlohmann::json::array({1, 2})), Error);
}

TEST_F(MetricsTest, ResumeDropsRecordsAfterTheCheckpoint) {
  {
    MetricsWriter w(run_dir_);
    w.write({{"event", "start"}});
    write_steps(w, 1, 10);
  }
  std::ofstream(metrics_path(run_dir_), std::ios::app) << "{\"step\": 11, \"lo";  // torn by a crash
  MetricsWriter resumed(run_dir_, 5);
  write_steps(resumed, 6, 8);
  auto m = read_metrics(resumed.path());
  EXPECT_EQ(m["loss"].steps, (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_NE(read_file(resumed.path()).find("\"event\":\"start\""), std::string::npos);
}

TEST_F(MetricsTest, FreshRunStartsEmpty) {
  {
    MetricsWriter w(run_dir_);
    write_steps(w, 1, 3);
  }
  MetricsWriter again(run_dir_);
  write_steps(again, 1, 1);
  EXPECT_EQ(read_metrics(again.path())["loss"].steps.size(), 1u);
}

TEST_F(MetricsTest, ReaderSkipsATornLastLineAndNamesABadOne) {
  MetricsWriter w(run_dir_);
  write_steps(w, 1, 2);
  std::ofstream(w.path(), std::ios::app) << "{\"step\": 3, \"lo";
  EXPECT_EQ(read_metrics(w.path())["loss"].steps.size(), 2u);

  std::ofstream(w.path(), std::ios::app) << "\n";
  try {
    read_metrics(w.path());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.context().file, w.path());
    EXPECT_NE(std::string(e.what()).find("line 3: not a JSON object"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace k3::train
