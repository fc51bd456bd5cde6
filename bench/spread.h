// How a benchmark summarizes repeated timings on a noisy host: the median, and the range the
// repetitions spanned (so a reader sees how far one figure can be trusted).
#pragma once

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3::bench {

struct Spread {
  double median = 0, min = 0, max = 0;
};

inline Spread spread(std::vector<double> v) {
  if (v.empty()) throw std::runtime_error("no repetitions to summarize");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {median, v.front(), v.back()};
}

// "median [min-max]" with `format` (a printf conversion such as "%.2f") for each number.
inline std::string spread_text(const Spread& s, const char* format) {
  const std::string f = std::string(format) + " [" + format + "-" + format + "]";
  char text[96];
  std::snprintf(text, sizeof text, f.c_str(), s.median, s.min, s.max);
  return text;
}

}  // namespace k3::bench
