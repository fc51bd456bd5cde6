// The generic engine of a TOML configuration made of fields: values read from TOML nodes with
// errors that say what was found, rules that say in words what a value must be, input paths
// resolved next to the file, and a field that erases its type so one table drives parsing,
// overrides, validation, reference docs and writing back. run_config.cpp declares the run
// configuration's table with it.
#pragma once

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/format.h"

namespace k3::train::toml_fields {

namespace fs = std::filesystem;
using SearchDirs = std::vector<fs::path>;  // where a relative input path is looked for

template <typename T>
std::string shortest(T v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

inline std::string format_value(int64_t v) { return std::to_string(v); }

inline std::string format_value(bool v) { return v ? "true" : "false"; }

inline std::string format_value(double v) {
  std::string s = shortest(v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // TOML needs 1.0, not 1
  return s;
}

inline std::string format_value(const std::string& v) {
  std::string out = "\"";
  for (unsigned char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += strprintf("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

inline std::string describe(const toml::node& node) {
  std::ostringstream os;
  os << node.type();
  node.visit([&os](const auto& v) {
    if constexpr (toml::is_value<decltype(v)>) os << " " << v;
  });
  return os.str();
}

template <typename T>
T from_node(const toml::node& node) {
  if constexpr (std::is_same_v<T, bool>) {  // true / false; 0 / 1 as older configs wrote them
    if (node.is_boolean()) return node.as_boolean()->get();
    K3_CHECK(node.is_integer() && (node.as_integer()->get() == 0 || node.as_integer()->get() == 1),
             "expected true or false, found ", describe(node));
    return node.as_integer()->get() == 1;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    K3_CHECK(node.is_integer(), "expected an integer, found ", describe(node));
    return node.as_integer()->get();
  } else if constexpr (std::is_same_v<T, double>) {
    K3_CHECK(node.is_number(), "expected a number, found ", describe(node));
    double v = node.is_integer() ? static_cast<double>(node.as_integer()->get())
                                 : node.as_floating_point()->get();
    K3_CHECK(std::isfinite(v), "expected a finite number, found ", describe(node));
    return v;
  } else {
    K3_CHECK(node.is_string(), "expected a string, found ", describe(node));
    return node.as_string()->get();
  }
}

// What a field's value must satisfy, said in words for the error message. RESOLVE, when set,
// turns a relative input path into an absolute one.
template <typename T>
struct Rule {
  std::function<bool(const T&)> ok;
  std::string expected;
  std::function<T(const T&, const SearchDirs&)> resolve = nullptr;
};

template <typename T>
Rule<T> above(T lo) {
  return {[lo](const T& v) { return v > lo; }, "a value > " + shortest(lo)};
}
template <typename T>
Rule<T> at_least(T lo) {
  return {[lo](const T& v) { return v >= lo; }, "a value >= " + shortest(lo)};
}

// An integer from lo to hi, both included.
inline Rule<int64_t> within_int(int64_t lo, int64_t hi) {
  return {[=](const int64_t& v) { return v >= lo && v <= hi; },
          "an integer from " + shortest(lo) + " to " + shortest(hi)};
}

// A value in the interval from lo to hi; each end open or closed.
inline Rule<double> within(char open, double lo, double hi, char close) {
  return {[=](const double& v) {
            return (open == '[' ? v >= lo : v > lo) && (close == ']' ? v <= hi : v < hi);
          },
          std::string("a value in ") + open + shortest(lo) + ", " + shortest(hi) + close};
}

inline Rule<bool> on_off() {
  return {[](const bool&) { return true; }, "true or false"};
}

inline Rule<std::string> one_of(std::vector<std::string> options) {
  std::string expected = "one of";
  for (const auto& o : options) expected += " \"" + o + "\"";
  return {[options](const std::string& v) {
            return std::find(options.begin(), options.end(), v) != options.end();
          },
          expected};
}

inline Rule<std::string> any_text() {
  return {[](const std::string&) { return true; }, "a string"};
}

inline std::string find_input(const std::string& path, const SearchDirs& dirs) {
  if (fs::path(path).is_absolute()) {
    K3_CHECK(fs::exists(path), "file not found: ", path);
    return path;
  }
  std::string tried;
  for (const fs::path& dir : dirs) {
    fs::path candidate = (dir / path).lexically_normal();
    if (fs::exists(candidate)) return candidate.string();
    tried += (tried.empty() ? "" : ", ") + candidate.string();
  }
  throw Error("file not found: " + path + " (looked for " + tried + ")");
}

// An existing file or directory, or one of `keywords` (taken as they are, not as paths).
inline Rule<std::string> input_path(std::vector<std::string> keywords = {}) {
  std::string names;
  for (const std::string& k : keywords) names += "\"" + k + "\" or ";
  return {[](const std::string& v) { return !v.empty(); }, names + "an existing path",
          [keywords](const std::string& v, const SearchDirs& dirs) {
            return std::find(keywords.begin(), keywords.end(), v) != keywords.end()
                       ? v
                       : find_input(v, dirs);
          }};
}

// Empty (not set), or an existing path.
inline Rule<std::string> optional_input_path() {
  return {[](const std::string&) { return true; }, "empty or an existing path",
          [](const std::string& v, const SearchDirs& dirs) {
            return v.empty() ? v : find_input(v, dirs);
          }};
}

// The TOML type a field is read from, as the reference names it.
template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "boolean";
  if constexpr (std::is_same_v<T, int64_t>) return "integer";
  if constexpr (std::is_same_v<T, double>) return "number";
  return "string";
}

// One configuration field of a CONFIG struct, with its type erased.
template <typename Config>
struct Field {
  std::string key;  // "section.name"
  std::string doc;
  std::string type;                                     // type_name
  std::string expected;                                 // the rule in words
  std::function<void(Config&, const toml::node&)> set;  // throws an Error without context
  std::function<std::string(const Config&)> format;
  std::function<void(Config&, const SearchDirs&)> resolve;  // empty unless an input path
};

// The field KEY: member MEMBER of section SECTION, checked by RULE.
template <typename Config, typename Section, typename T>
Field<Config> field(std::string key, Section Config::*section, T Section::*member, Rule<T> rule,
                    std::string doc) {
  Field<Config> f{std::move(key), std::move(doc), type_name<T>(), rule.expected, {}, {}, {}};
  f.set = [=](Config& c, const toml::node& node) {
    T v = from_node<T>(node);
    K3_CHECK(rule.ok(v), "expected ", rule.expected, ", got ", format_value(v));
    (c.*section).*member = std::move(v);
  };
  f.format = [=](const Config& c) { return format_value((c.*section).*member); };
  if (rule.resolve)
    f.resolve = [=](Config& c, const SearchDirs& dirs) {
      (c.*section).*member = rule.resolve((c.*section).*member, dirs);
    };
  return f;
}

}  // namespace k3::train::toml_fields
