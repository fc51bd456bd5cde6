#include "k3/base/format.h"

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

namespace k3 {

std::string strprintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int size = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(size > 0 ? static_cast<size_t>(size) : 0, '\0');
  if (size > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? strprintf("%.0f B", bytes)
                : strprintf(bytes < 100 ? "%.2f %s" : "%.1f %s", bytes, units[u]);
}

std::optional<double> parse_bytes(std::string_view text) {
  const std::string t(text);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = t.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double scale = unit.empty() ? 1 : 0;
  for (int i = 0; i < 5; ++i)
    if (unit == units[i]) scale = static_cast<double>(uint64_t{1} << (10 * i));
  if (scale == 0 || !(v > 0) || !std::isfinite(v)) return std::nullopt;
  return v * scale;
}

}  // namespace k3
