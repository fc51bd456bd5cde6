#include "k3/scaling/scaling_csv.h"

#include <cmath>
#include <cstdlib>

#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/base/strings.h"

namespace k3::scaling {

std::vector<std::string> split_fields(std::string_view line, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t i = 0; i <= line.size(); ++i)
    if (i == line.size() || line[i] == sep) {
      out.emplace_back(trim(line.substr(begin, i - begin)));
      begin = i + 1;
    }
  return out;
}

ScalingRuns parse_scaling_csv(const std::string& text, const std::string& path,
                              const ScalingColumns& columns, size_t min_rows) {
  std::vector<std::string> lines = split_fields(text, '\n');
  for (std::string& l : lines)
    if (!l.empty() && l.back() == '\r') l.pop_back();
  K3_CHECK_CTX(!lines.empty() && !lines[0].empty(), (ErrorContext{path, "", -1}), "no header row");
  const std::vector<std::string> header = split_fields(lines[0], ',');
  auto column = [&](const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    K3_CHECK_CTX(false, (ErrorContext{path, name, -1}), "no such column in the header");
    return size_t{0};
  };
  const size_t n_col = column(columns.params), d_col = column(columns.tokens),
               l_col = column(columns.loss);
  std::vector<std::pair<size_t, std::string>> filters;
  for (const auto& [name, value] : columns.where) filters.emplace_back(column(name), value);

  ScalingRuns runs;
  for (size_t line = 2; line <= lines.size(); ++line) {
    const std::string& row = lines[line - 1];
    if (trim(row).empty()) continue;
    const std::vector<std::string> fields = split_fields(row, ',');
    K3_CHECK_CTX(fields.size() == header.size(), (ErrorContext{path, "", -1}), "line ", line, ": ",
                 fields.size(), " fields, the header has ", header.size());
    bool selected = true;
    for (const auto& [col, value] : filters) selected = selected && fields[col] == value;
    if (!selected) continue;
    auto positive = [&](size_t col) {
      const std::string& field = fields[col];
      char* end = nullptr;
      const double v = field.empty() ? NAN : std::strtod(field.c_str(), &end);
      K3_CHECK_CTX(
          !field.empty() && end == field.c_str() + field.size() && std::isfinite(v) && v > 0,
          (ErrorContext{path, header[col], -1}), "line ", line, ": '", field,
          "' is not a finite positive number");
      return v;
    };
    runs.params.push_back(positive(n_col));
    runs.tokens.push_back(positive(d_col));
    runs.loss.push_back(positive(l_col));
    runs.lines.push_back(line);
  }
  K3_CHECK_CTX(runs.loss.size() >= min_rows, (ErrorContext{path, "", -1}), runs.loss.size(),
               " rows selected, the fit needs at least ", min_rows);
  return runs;
}

ScalingRuns read_scaling_csv(const std::string& path, const ScalingColumns& columns,
                             size_t min_rows) {
  return parse_scaling_csv(read_file(path), path, columns, min_rows);
}

}  // namespace k3::scaling
