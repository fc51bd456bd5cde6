#include "k3/base/strings.h"

namespace k3 {

std::string trim(std::string_view s) {
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace k3
