// Reading ../shared/reference/kimi-k3/weights.tsv, the tensor list of the released K3 checkpoint:
// its tab-separated rows, their "[a, b, ...]" shapes, and the {l} / {e} placeholders of the names.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3::testing {

// A row's columns: name pattern, layers, shape, dtype (and a note where there is one).
inline std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> col;
  std::istringstream row(line);
  for (std::string field; std::getline(row, field, '\t');) col.push_back(field);
  return col;
}

// Comment lines, blank lines and the column header hold no tensor.
inline bool is_tensor_row(const std::string& line) {
  return !line.empty() && line[0] != '#' && line.rfind("name\t", 0) != 0;
}

inline Shape parse_shape(std::string text) {  // "[12288, 1, 4]"
  Shape s;
  for (char& c : text)
    if (c == '[' || c == ']' || c == ',') c = ' ';
  std::istringstream in(text);
  for (int64_t d; in >> d;) s.push_back(d);
  return s;
}

// `s` with its first `from` replaced by `to` (each placeholder occurs once in a name).
inline std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

}  // namespace k3::testing
