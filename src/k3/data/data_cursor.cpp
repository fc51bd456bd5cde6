#include "k3/data/data_cursor.h"

#include <charconv>

#include "k3/base/error.h"

namespace k3::data {
namespace {

bool parse_count(std::string_view text, int64_t& value) {
  if (text.empty() || text[0] == '-' || text[0] == '+') return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string DataCursor::to_string() const {
  return std::to_string(epoch) + ":" + std::to_string(position);
}

DataCursor DataCursor::parse(std::string_view text) {
  DataCursor c;
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos || !parse_count(text.substr(0, colon), c.epoch) ||
      !parse_count(text.substr(colon + 1), c.position))
    throw Error(
        "expected EPOCH:POSITION with two non-negative integers, got '" + std::string(text) + "'",
        ErrorContext{"", "data cursor", -1});
  return c;
}

}  // namespace k3::data
