// Numeric command-line options read by k3lab instead of CLI11, which takes "nan" and "inf" for a
// real, wraps "-5" into a huge unsigned, reads "010" as octal and saturates a whole number past its
// type. A value here is decimal, finite, fits its type and lies in the option's bounds; anything
// else is refused in one line naming the option, the text and the bounds.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "k3/base/error.h"
#include "k3/base/format.h"

namespace k3::apps {

constexpr double kUnbounded = std::numeric_limits<double>::max();

// [lo, hi], or (lo, hi] where `above` is set; the type's extremes: no bound that side.
template <typename T>
struct Bounds {
  T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  bool above = false;
};

// "in [1, 8]", "> 0", or "" when unbounded.
template <typename T>
std::string bounds_text(const Bounds<T>& b) {
  auto num = [](T v) {
    if constexpr (std::is_floating_point_v<T>)
      return strprintf("%.15g", static_cast<double>(v));
    else
      return std::to_string(v);
  };
  const Bounds<T> none;
  if (b.hi != none.hi) return (b.above ? "in (" : "in [") + num(b.lo) + ", " + num(b.hi) + "]";
  if (b.lo != none.lo || b.above) return (b.above ? "> " : ">= ") + num(b.lo);
  return "";
}

template <typename T>
T parse_number(const std::string& option, const std::string& text, const Bounds<T>& b = {}) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  bool ok = ec == std::errc() && end == text.data() + text.size();
  if constexpr (std::is_floating_point_v<T>) ok = ok && std::isfinite(v);
  const std::string bounds = bounds_text(b);
  const char* kind = std::is_floating_point_v<T> ? "a finite number" : "a whole number";
  K3_CHECK(ok, option, " '", text, "' is not ", kind, bounds.empty() ? "" : " ", bounds);
  K3_CHECK(v <= b.hi && (b.above ? v > b.lo : v >= b.lo), option, " ", text, ": must be ", bounds);
  return v;
}

// add_option(name, value, help) with the value read by parse_number; its default is shown.
template <typename T>
CLI::Option* add_number(CLI::App* cmd, const std::string& name, T& value, const std::string& help,
                        const Bounds<T>& b = {}) {
  std::string shown = std::to_string(value);
  if constexpr (std::is_floating_point_v<T>) shown = strprintf("%.15g", static_cast<double>(value));
  return cmd
      ->add_option_function<std::string>(
          name, [&value, name, b](const std::string& text) { value = parse_number(name, text, b); },
          help)
      ->type_name(std::is_floating_point_v<T> ? "FLOAT" : "INT")
      ->default_str(shown);
}

}  // namespace k3::apps
