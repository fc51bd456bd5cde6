// printf-style formatting into a std::string, for fixed-precision numbers in text output.
#pragma once

#include <string>

namespace k3 {

std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace k3
