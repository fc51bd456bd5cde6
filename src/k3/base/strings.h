// Small string utilities shared by the config parsers and the parameter names.
#pragma once

#include <string>
#include <string_view>

namespace k3 {

// The parts one after another, in one allocation (a std::string's + copies its left side, then
// grows the copy): a described K3 rank builds a quarter of a million parameter names.
template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  const std::string_view views[] = {std::string_view(parts)...};
  size_t size = 0;
  for (std::string_view v : views) size += v.size();
  std::string s;
  s.reserve(size);
  for (std::string_view v : views) s.append(v);
  return s;
}

// s without leading and trailing spaces and tabs.
std::string trim(std::string_view s);

// Whether `name` matches `pattern` whole: '*' matches any run of characters (dots included),
// everything else matches itself.
bool glob_match(std::string_view pattern, std::string_view name);

}  // namespace k3
