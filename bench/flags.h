// What the benchmarks against PyTorch share: their command line ("--name value" pairs), and the
// shell command that starts a PyTorch script in its own environment.
#pragma once

#include <filesystem>
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

// `s` single-quoted for /bin/sh.
inline std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The start of the shell command running bench_dir/script with `threads` OpenMP threads: OpenBLAS
// on its native kernel (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset), huge pages for malloc,
// passive OpenMP waiting. The caller appends the script's flags.
inline std::string torch_command(const std::filesystem::path& bench_dir, const std::string& script,
                                 int threads) {
  return "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "
         "OMP_WAIT_POLICY=passive OMP_NUM_THREADS=" +
         std::to_string(threads) + " /usr/bin/python3 " + quoted((bench_dir / script).string());
}

}  // namespace k3::bench
