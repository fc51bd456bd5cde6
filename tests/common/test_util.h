// Helpers shared by the tests: seeded random data, error measures, finite differences, thread
// counts, temporary folders, and the messages of expected errors.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/threads.h"

namespace k3::testing {

// The source tree (configs/), and the shared folder beside it (reference/, data/). Strings made
// once at run time: with the path's length a constant, GCC 12 reports bounds and overlaps in the
// copies of `source_dir() + "..."` that cannot happen (-Warray-bounds, -Wrestrict).
inline const std::string& source_dir() {
  static const std::string dir = K3LAB_SOURCE_DIR;
  return dir;
}
inline const std::string& shared_dir() {
  static const std::string dir = source_dir() + "/../shared";
  return dir;
}

// Skips the calling test, in one line naming the file and what it is, when the shared folder does
// not hold RELATIVE (a checkout without ../shared); where it is present the test runs.
#define K3_SKIP_WITHOUT_SHARED(relative, what)                                   \
  if (std::filesystem::exists(::k3::testing::shared_dir() + "/" + (relative))) { \
  } else                                                                         \
    GTEST_SKIP() << "needs ../shared/" << (relative) << " (" << (what) << "), absent here"

template <typename T = float>
std::vector<T> random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

template <typename To, typename From>
std::vector<To> cast_vec(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// Uniform integers in [0, vocab): token ids and class targets.
inline std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = dist(rng);
  return v;
}

// Sets k3lab's thread count for the enclosing scope (determinism across thread counts).
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(num_threads()) { set_num_threads(n); }
  ~ScopedThreads() { set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

// A fresh folder under the system temp dir, PREFIX_<test name>_<pid>, removed when the test ends.
// With create = false it starts absent, for code that must create it itself.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix, bool create = true) {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (prefix + "_" + (test ? test->name() : "none") + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    if (create) std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes CONTENTS to the file NAME in the folder; returns its path.
  std::string file(const std::string& name, const std::string& contents) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << contents;
    return p;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// The message of the k3::Error that F throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// max_i |a_i - b_i| / (atol + rtol * |b_i|) <= 1 means "close".
template <typename A, typename B>
double closeness(const std::vector<A>& a, const std::vector<B>& b, double atol, double rtol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    double r = d / (atol + rtol * std::abs(static_cast<double>(b[i])));
    if (!(r <= worst)) worst = r;  // NaN propagates as failure
  }
  return worst;
}

#define K3_EXPECT_CLOSE(a, b, atol, rtol) \
  EXPECT_LE(::k3::testing::closeness((a), (b), (atol), (rtol)), 1.0) << #a " vs " #b

// Central finite-difference gradient of a scalar function f(x) in double precision.
inline std::vector<double> finite_difference(const std::function<double(const std::vector<double>&)>& f,
                                             std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f(x);
    x[i] = x0 - h;
    double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// Dot product, used to project a vector output to a scalar for finite differences.
template <typename T>
double dot(const std::vector<T>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace k3::testing
