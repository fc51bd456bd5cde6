// Where a Batcher stands in its endless sequence of windows: the epoch, and how many windows of
// that epoch were already served. Saved in checkpoints; restoring it resumes bit-identically.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace k3::data {

struct DataCursor {
  int64_t epoch = 0;
  int64_t position = 0;

  std::string to_string() const;  // "EPOCH:POSITION", e.g. "3:1200"
  // Inverse of to_string; throws a k3::Error (field "data cursor") for anything else.
  static DataCursor parse(std::string_view text);
  bool operator==(const DataCursor&) const = default;
};

}  // namespace k3::data
