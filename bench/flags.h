// The command line of the benchmarks that compare against PyTorch: "--name value" pairs.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace k3::bench {

// The value of each flag given; a flag not in `known` or without a value is an error.
inline std::map<std::string, std::string> parse_flags(int argc, char** argv,
                                                      const std::set<std::string>& known) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (!known.count(flag)) throw std::runtime_error("unknown flag " + flag);
    if (i + 1 == argc) throw std::runtime_error("missing value after " + flag);
    flags[flag] = argv[i + 1];
  }
  return flags;
}

}  // namespace k3::bench
