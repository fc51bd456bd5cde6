// Random inputs of the gated delta rule as the KDA layer produces them, for the kernel tests and
// the context-parallel ones.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "k3/kernels/kda/delta_rule.h"

namespace k3::testing {

using kernels::kda::DeltaRuleShape;

inline DeltaRuleShape shape(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V) {
  DeltaRuleShape s;
  s.B = B, s.T = T, s.H = H, s.K = K, s.V = V;
  return s;
}

inline double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
inline double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

// Bounded: g = −5·sigmoid(·) as math §3 step 4 makes it (−0.65 per token on average: a chunk's
// entry state reaches its last token attenuated to ~1e-18). Unbounded: a quarter of the tokens
// take the Kimi-Linear form −exp(A)·softplus(·) with decays down to a few hundred per token.
// Slow: log-uniform in [−0.1, −0.01] per token, what a freshly initialized layer produces; a
// chunk's entry state keeps at least e^{−6.4} of its weight over the chunk, so how the state
// crosses chunk boundaries shows in every later output and gradient.
// AtBound: every even channel at the bound −5 on every token, the odd channels slow.
enum class Decay { Bounded, Unbounded, Slow, AtBound };

inline double slow_decay(double uniform01) { return -std::pow(10.0, -1 - uniform01); }

// Inputs as the KDA layer produces them: q, k L2-normalized per head (q also scaled by K^−1/2),
// β in (0, 1); random initial states, output gradients and final-state gradients.
struct Problem {
  DeltaRuleShape s;
  std::vector<int64_t> docs;
  std::vector<float> q, k, v, g, beta, init, dout, dfinal;

  Problem(const DeltaRuleShape& shape, uint64_t seed, Decay decay = Decay::Bounded,
          std::vector<int64_t> doc_starts = {})
      : s(shape), docs(std::move(doc_starts)) {
    s.doc_starts = docs;
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform;
    const int64_t rows = s.B * s.T * s.H, states = s.num_sequences() * s.H * s.K * s.V;
    q.resize(rows * s.K);
    k.resize(rows * s.K);
    g.resize(rows * s.K);
    auto normalized = [&](float* x, double scale) {
      double n = 0;
      for (int64_t c = 0; c < s.K; ++c) {
        x[c] = static_cast<float>(normal(rng));
        n += x[c] * x[c];
      }
      for (int64_t c = 0; c < s.K; ++c) x[c] = static_cast<float>(x[c] * scale / std::sqrt(n));
    };
    for (int64_t i = 0; i < rows; ++i) {
      normalized(&q[i * s.K], 1 / std::sqrt(static_cast<double>(s.K)));
      normalized(&k[i * s.K], 1);
      const bool steep = decay == Decay::Unbounded && uniform(rng) < 0.25;
      for (int64_t c = 0; c < s.K; ++c) {
        const double x = normal(rng);
        double gc = -5 * sigmoid(2 * x - 3);
        if (steep)
          gc = -std::exp(2 * uniform(rng)) * softplus(8 * x + 10);
        else if (decay == Decay::AtBound && c % 2 == 0)
          gc = -5.0;
        else if (decay == Decay::Slow || decay == Decay::AtBound)
          gc = slow_decay(uniform(rng));
        g[i * s.K + c] = static_cast<float>(gc);
      }
    }
    v = testing::random_vec(rows * s.V, seed + 1);
    beta.resize(rows);
    for (auto& b : beta) b = static_cast<float>(sigmoid(2 * normal(rng)));
    init = testing::random_vec(states, seed + 2, -0.5, 0.5);
    dout = testing::random_vec(rows * s.V, seed + 3);
    dfinal = testing::random_vec(states, seed + 4);
  }

  // Tokens [t0, t1) of batch row 0 as a problem of its own, with the given per-head states.
  Problem slice(int64_t t0, int64_t t1, std::vector<float> initial,
                std::vector<float> dfinal_state) const {
    Problem p = *this;
    p.docs.clear();
    p.s = shape(1, t1 - t0, s.H, s.K, s.V);
    auto rows = [&](const std::vector<float>& x, int64_t width) {
      return std::vector<float>(x.begin() + t0 * s.H * width, x.begin() + t1 * s.H * width);
    };
    p.q = rows(q, s.K), p.k = rows(k, s.K), p.g = rows(g, s.K), p.v = rows(v, s.V);
    p.beta = rows(beta, 1), p.dout = rows(dout, s.V);
    p.init = std::move(initial);
    p.dfinal = std::move(dfinal_state);
    return p;
  }
};

}  // namespace k3::testing
