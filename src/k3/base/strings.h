// Small string utilities shared by the config parsers.
#pragma once

#include <string>
#include <string_view>

namespace k3 {

// s without leading and trailing spaces and tabs.
std::string trim(std::string_view s);

}  // namespace k3
