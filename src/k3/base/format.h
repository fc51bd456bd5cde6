// printf-style formatting into a std::string, for fixed-precision numbers in text output.
#pragma once

#include <string>

namespace k3 {

std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// A byte count in the largest binary unit that keeps it at 1 or more: "1.50 GiB", "768.0 KiB".
std::string format_bytes(double bytes);

}  // namespace k3
