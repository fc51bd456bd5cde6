// The attention layers' math in double precision, one token and one head at a time, written from
// the definitions (math §4) for the layer tests to compare against.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "k3/model/params.h"

namespace k3::testing::naive {

// A layer's weights PREFIX.NAME.weight by NAME, in double precision.
using Weights = std::map<std::string, std::vector<double>>;
inline Weights weights_of(const model::ParamRegistry& reg, const std::string& prefix,
                          const std::vector<std::string>& names) {
  Weights w;
  for (const std::string& name : names) {
    const Tensor t = reg.value(reg.find(prefix + "." + name + ".weight"));
    w[name].assign(t.f32(), t.f32() + t.numel());
  }
  return w;
}

// y = W x with W [out, in].
inline std::vector<double> matvec(const std::vector<double>& W, const double* x, size_t out,
                                  size_t in) {
  std::vector<double> y(out, 0.0);
  for (size_t i = 0; i < out; ++i)
    for (size_t j = 0; j < in; ++j) y[i] += W[i * in + j] * x[j];
  return y;
}

inline std::vector<double> rms_norm(std::vector<double> x, const std::vector<double>& w,
                                    double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  const double rstd = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= rstd * w[i];
  return x;
}

// Turns v[0, d) as rotary embeddings do at position p (math §4.1): the pair (i, i + d/2) by the
// angle p·θ^(−2i/d).
inline void rotate(double* v, size_t d, double theta, size_t p) {
  for (size_t i = 0; i < d / 2; ++i) {
    const double a = static_cast<double>(p) *
                     std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const double x = v[i], y = v[i + d / 2];
    v[i] = x * std::cos(a) - y * std::sin(a);
    v[i + d / 2] = y * std::cos(a) + x * std::sin(a);
  }
}

// Causal softmax attention of one head: query t's output, the weighted values of keys 0..t, with
// score(t, s) the caller's (already scaled).
template <typename Score, typename Value>
std::vector<double> attend(size_t t, size_t dv, Score score, Value value) {
  std::vector<double> p(t + 1), out(dv, 0.0);
  double mx = -INFINITY, sum = 0;
  for (size_t s = 0; s <= t; ++s) mx = std::max(mx, p[s] = score(s));
  for (double& ps : p) sum += (ps = std::exp(ps - mx));
  for (size_t s = 0; s <= t; ++s) {
    const double* v = value(s);
    for (size_t j = 0; j < dv; ++j) out[j] += p[s] / sum * v[j];
  }
  return out;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace k3::testing::naive
