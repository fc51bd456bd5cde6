// The points of a scaling-law fit from a CSV file with a header row: three named columns
// (parameters, tokens, loss), optionally only the rows where other columns hold given values.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3::scaling {

struct ScalingColumns {
  std::string params, tokens, loss;
  std::vector<std::pair<std::string, std::string>> where;  // keep rows with column == value
};

struct ScalingRuns {
  std::vector<double> params, tokens, loss;
  std::vector<size_t> lines;  // the 1-based line of each point in the file
};

// Fields separated by SEP, kept as they are (no quoting: the scaling tables have none).
std::vector<std::string> split_fields(std::string_view line, char sep);

// Refuses, in one line naming the file, the line and the column: a missing column, a value that
// is not a finite number, N, D or loss <= 0, a short row, and fewer than MIN_ROWS selected rows.
ScalingRuns parse_scaling_csv(const std::string& text, const std::string& path,
                              const ScalingColumns& columns, size_t min_rows);
ScalingRuns read_scaling_csv(const std::string& path, const ScalingColumns& columns,
                             size_t min_rows);

}  // namespace k3::scaling
