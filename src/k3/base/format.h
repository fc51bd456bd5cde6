// printf-style formatting into a std::string, for fixed-precision numbers in text output.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace k3 {

std::string strprintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// A byte count in the largest binary unit that keeps it at 1 or more: "1.50 GiB", "768.0 KiB".
std::string format_bytes(double bytes);

// "2GiB", "512 MiB", "1.5GiB", "64KiB", "4096" (bytes): a positive byte count; none for anything
// else. Units are binary: B, KiB, MiB, GiB, TiB.
std::optional<double> parse_bytes(std::string_view text);

}  // namespace k3
