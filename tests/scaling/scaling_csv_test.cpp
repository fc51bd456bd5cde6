#include "k3/scaling/scaling_csv.h"

#include <gtest/gtest.h>

#include "common/test_util.h"

namespace k3::scaling {
namespace {

const ScalingColumns kColumns{"N", "D", "loss", {}};

std::string error_for(const std::string& text, size_t min_rows = 2,
                      const ScalingColumns& columns = kColumns) {
  return testing::error_of([&] { parse_scaling_csv(text, "runs.csv", columns, min_rows); });
}

TEST(ScalingCsv, ReadsTheNamedColumnsOfTheSelectedRows) {
  const std::string text =
      "name,N,D,loss,set\n"
      "x,1e8,2e9,3.5,a\n"
      "y,2e8,4e9,3.25,b\r\n"
      "\n"
      "z,4e8,8e9,3.0,a\n";
  ScalingRuns all = parse_scaling_csv(text, "runs.csv", kColumns, 3);
  EXPECT_EQ(all.params, (std::vector<double>{1e8, 2e8, 4e8}));
  EXPECT_EQ(all.tokens, (std::vector<double>{2e9, 4e9, 8e9}));
  EXPECT_EQ(all.loss, (std::vector<double>{3.5, 3.25, 3.0}));
  EXPECT_EQ(all.lines, (std::vector<size_t>{2, 3, 5}));
  ScalingColumns only_a = kColumns;
  only_a.where = {{"set", "a"}};
  ScalingRuns a = parse_scaling_csv(text, "runs.csv", only_a, 2);
  EXPECT_EQ(a.lines, (std::vector<size_t>{2, 5}));
}

// Each refusal is one line naming the file, the column and the line.
TEST(ScalingCsv, RefusesMalformedTablesNamingFileLineAndColumn) {
  const std::string header = "N,D,loss\n";
  EXPECT_EQ(error_for("N,tokens,loss\n1,2,3\n"),
            "file runs.csv, field D: no such column in the header");
  EXPECT_EQ(error_for(header + "1e8,2e9,3\n0,2e9,3\n"),
            "file runs.csv, field N: line 3: '0' is not a finite positive number");
  EXPECT_EQ(error_for(header + "1e8,-2e9,3\n1e8,2e9,3\n"),
            "file runs.csv, field D: line 2: '-2e9' is not a finite positive number");
  EXPECT_EQ(error_for(header + "1e8,2e9,nan\n1e8,2e9,3\n"),
            "file runs.csv, field loss: line 2: 'nan' is not a finite positive number");
  EXPECT_EQ(error_for(header + "1e8,2e9,3.1x\n"),
            "file runs.csv, field loss: line 2: '3.1x' is not a finite positive number");
  EXPECT_EQ(error_for(header + "1e8,2e9,\n"),
            "file runs.csv, field loss: line 2: '' is not a finite positive number");
  EXPECT_EQ(error_for(header + "1e8,2e9\n"), "file runs.csv: line 2: 2 fields, the header has 3");
  EXPECT_EQ(error_for(header + "1e8,2e9,3\n", 6),
            "file runs.csv: 1 rows selected, the fit needs at least 6");
  EXPECT_EQ(error_for(""), "file runs.csv: no header row");
  ScalingColumns where = kColumns;
  where.where = {{"set", "a"}};
  EXPECT_EQ(error_for(header + "1,2,3\n", 1, where),
            "file runs.csv, field set: no such column in the header");
}

TEST(ScalingCsv, AMissingFileIsNamed) {
  const std::string e =
      testing::error_of([] { read_scaling_csv("/nonexistent/runs.csv", kColumns, 2); });
  EXPECT_NE(e.find("/nonexistent/runs.csv"), std::string::npos) << e;
}

}  // namespace
}  // namespace k3::scaling
