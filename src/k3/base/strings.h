// Small string utilities shared by the config parsers.
#pragma once

#include <string>
#include <string_view>

namespace k3 {

// s without leading and trailing spaces and tabs.
std::string trim(std::string_view s);

// Whether `name` matches `pattern` whole: '*' matches any run of characters (dots included),
// everything else matches itself.
bool glob_match(std::string_view pattern, std::string_view name);

}  // namespace k3
