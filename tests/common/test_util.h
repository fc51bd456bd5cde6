// Helpers shared by the tests: seeded random data, error measures, finite differences.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace k3::testing {

// The source tree (configs/), and the shared folder beside it (reference/, data/).
inline std::string source_dir() { return K3LAB_SOURCE_DIR; }
inline std::string shared_dir() { return source_dir() + "/../shared"; }

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

// Sets the OpenMP thread count for the enclosing scope (determinism across thread counts).
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

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
