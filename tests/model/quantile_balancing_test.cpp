#include "k3/model/quantile_balancing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/test_util.h"
#include "k3/base/error.h"

namespace k3::model {
namespace {

using QB = QuantileBalancer;

TEST(SelectTopK, BiasSelectsTiesGoToTheLowerIndex) {
  const std::vector<float> s = {0.5f, 0.7f, 0.5f, 0.7f, 0.1f};
  std::vector<float> b(5, 0.f);
  std::vector<int32_t> ids(4);
  EXPECT_EQ(select_top_k(s.data(), b.data(), 5, 2, ids.data()), 0.5f);  // α: expert 0's s + b
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 2), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(select_top_k(s.data(), b.data(), 5, 3, ids.data()), 0.5f);  // α: expert 2's
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 3), (std::vector<int32_t>{1, 3, 0}));
  b[2] = 0.3f;  // the bias moves expert 2 to the front; expert 3 is now the cutoff
  EXPECT_EQ(select_top_k(s.data(), b.data(), 5, 2, ids.data()), 0.7f);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 2), (std::vector<int32_t>{2, 1}));
  const std::vector<float> with_nan = {NAN, 0.2f, 0.1f}, zero(3, 0.f);
  select_top_k(with_nan.data(), zero.data(), 3, 1, ids.data());
  EXPECT_EQ(ids[0], 1);  // a NaN score is never chosen over a number
}

TEST(QuantileBalancing, BinFormula) {
  EXPECT_EQ(QB::bin(-1.0, -1, 1), 0);
  EXPECT_EQ(QB::bin(0.0, -1, 1), 500);
  EXPECT_EQ(QB::bin(0.0015, -1, 1), 500);   // floor(500.75)
  EXPECT_EQ(QB::bin(-0.0015, -1, 1), 499);  // floor(499.25)
  EXPECT_EQ(QB::bin(0.999, -1, 1), 999);
  EXPECT_EQ(QB::bin(1.0, -1, 1), 999);  // clamped from 1000
  EXPECT_EQ(QB::bin(-7.0, -1, 1), 0);
  EXPECT_EQ(QB::bin(1.0, 0, 4), 250);
  EXPECT_EQ(QB::bin(NAN, -1, 1), 0);
  EXPECT_EQ(QB::bin(INFINITY, -1, 1), 999);
}

TEST(QuantileBalancing, ObserveCountsEveryExpertOfEveryToken) {
  QB qb(3, 1);
  // One token: expert 0 is chosen, α = 0.5 (the 2nd largest), r = α − s = {−0.3731, 0, 0.2887}.
  const std::vector<float> s = {0.8731f, 0.5f, 0.2113f}, alpha = {0.5f};
  const std::vector<int32_t> ids = {0};
  qb.observe(s.data(), alpha.data(), ids.data(), 1);
  EXPECT_EQ(qb.histogram(0, 313), 1);  // floor(0.6269 · 500)
  EXPECT_EQ(qb.histogram(1, 500), 1);
  EXPECT_EQ(qb.histogram(2, 644), 1);  // floor(1.2887 · 500)
  EXPECT_EQ(std::accumulate(qb.counts().begin(), qb.counts().end() - 4, int64_t{0}), 3);
  EXPECT_EQ(qb.tokens(), 1);
  const auto load = qb.counts().subspan(3 * QB::kBins, 3);
  EXPECT_EQ(std::vector<int64_t>(load.begin(), load.end()), (std::vector<int64_t>{1, 0, 0}));
}

// Hand-made histograms, the math §6 update worked out on paper.
TEST(QuantileBalancing, UpdateFormula) {
  QB qb(2, 1);
  auto c = qb.counts();
  // m = 4 tokens, q = 4·1/2 = 2, R = 2.
  c[100] = 1, c[200] = 3;                          // expert 0: β = 200, before 1, frac (2−1)/3
  c[QB::kBins + 700] = 2, c[QB::kBins + 900] = 2;  // expert 1: β = 700, before 0, frac 2/2
  c[2 * QB::kBins] = 3, c[2 * QB::kBins + 1] = 1;  // loads
  c[2 * QB::kBins + 2] = 4;
  std::vector<float> bias(2, 0.f);
  const ExpertLoadStats st = qb.update(bias.data());
  // b' = −1 + (β + frac)·2/1000: −0.5993333 and 0.402; mean −0.0986667.
  EXPECT_NEAR(bias[0], -0.5006667, 1e-6);
  EXPECT_NEAR(bias[1], 0.5006667, 1e-6);
  EXPECT_NEAR(qb.lo(), -1.5006667, 1e-6);
  EXPECT_NEAR(qb.hi(), 1.5006667, 1e-6);
  EXPECT_EQ(st.tokens, 4);
  EXPECT_EQ(st.load, (std::vector<int64_t>{3, 1}));
  EXPECT_DOUBLE_EQ(st.maxvio, 0.5);  // 3 / mean 2 − 1
  EXPECT_EQ(st.min_load, 1);
  EXPECT_EQ(st.max_load, 3);
  EXPECT_EQ(st.idle, 0);
  for (int64_t v : qb.counts()) ASSERT_EQ(v, 0);

  // A fractional target: m = 2, E = 3, k = 1: q = 2/3, R = 1.
  QB small(3, 1);
  auto d = small.counts();
  d[10] = 2;                                       // β = 10, frac (2/3)/2
  d[QB::kBins + 500] = 1, d[QB::kBins + 600] = 1;  // β = 500, frac (2/3)/1
  d[2 * QB::kBins + 999] = 2;                      // β = 999, frac (2/3)/2
  d[3 * QB::kBins] = 2, d[3 * QB::kBins + 3] = 2;
  std::vector<float> b3(3, 0.f);
  const ExpertLoadStats st3 = small.update(b3.data());
  // b' = −0.9793333, 0.0013333, 0.9986667; mean 0.0068889.
  EXPECT_NEAR(b3[0], -0.9862222, 1e-6);
  EXPECT_NEAR(b3[1], -0.0055556, 1e-6);
  EXPECT_NEAR(b3[2], 0.9917778, 1e-6);
  EXPECT_EQ(st3.idle, 2);
  EXPECT_DOUBLE_EQ(st3.maxvio, 2.0);  // 2 / (2/3) − 1
}

TEST(QuantileBalancing, NoTokensKeepsTheState) {
  QB qb(4, 2);
  qb.set_range(-2.5f, 3.0f);
  std::vector<float> bias = {0.1f, -0.2f, 0.3f, -0.2f};
  const auto before = bias;
  const ExpertLoadStats st = qb.update(bias.data());
  EXPECT_EQ(bias, before);
  EXPECT_EQ(qb.lo(), -2.5f);
  EXPECT_EQ(qb.hi(), 3.0f);
  EXPECT_EQ(st.tokens, 0);
  EXPECT_EQ(st.maxvio, 0);
  EXPECT_EQ(st.idle, 4);
}

TEST(QuantileBalancing, ReducerSeesTheWholeCountBufferOnce) {
  QB qb(4, 1);
  const std::vector<float> s = {0.9f, 0.1f, 0.2f, 0.3f}, alpha = {0.3f};
  const std::vector<int32_t> ids = {0};
  qb.observe(s.data(), alpha.data(), ids.data(), 1);
  int calls = 0;
  std::vector<float> bias(4, 0.f);
  const ExpertLoadStats st = qb.update(bias.data(), [&](std::span<int64_t> counts) {
    ++calls;
    EXPECT_EQ(counts.size(), size_t{4 * QB::kBins + 4 + 1});
    for (int64_t& v : counts) v *= 3;  // as if three ranks had seen the same token
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(st.tokens, 3);
  EXPECT_EQ(st.load, (std::vector<int64_t>{3, 0, 0, 0}));
}

TEST(QuantileBalancing, RangeValidation) {
  QB qb(4, 1);
  EXPECT_THROW(qb.set_range(1.f, 1.f), Error);
  EXPECT_THROW(qb.set_range(NAN, 1.f), Error);
  EXPECT_THROW(QB(4, 4), Error);  // needs E > k
}

// The effect: a router that strongly prefers the low-numbered experts. Every global batch draws
// fresh tokens, routes them with the current bias, then updates. Loads must approach m·k/E.
TEST(QuantileBalancing, BalancesASkewedRouter) {
  const int64_t E = 16, k = 2, m = 2048;
  QB qb(E, k);
  std::vector<float> bias(E, 0.f), s(m * E), alpha(m);
  std::vector<int32_t> ids(m * k), top(k + 1);
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> maxvio;
  for (int batch = 0; batch < 25; ++batch) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < E; ++j)  // logits skewed by up to 3 towards expert 0
        s[i * E + j] = static_cast<float>(1 / (1 + std::exp(-(noise(rng) + 3.0 * (E - j) / E))));
      alpha[i] = select_top_k(&s[i * E], bias.data(), E, k, top.data());
      std::copy(top.begin(), top.begin() + k, ids.begin() + i * k);
    }
    qb.observe(s.data(), alpha.data(), ids.data(), m);
    maxvio.push_back(qb.update(bias.data()).maxvio);
  }
  EXPECT_GT(maxvio[0], 2.0);  // unbalanced at the start: expert 0 takes > 3x its share
  for (size_t i = maxvio.size() - 5; i < maxvio.size(); ++i) EXPECT_LT(maxvio[i], 0.25) << i;
  // The favoured experts end with the lowest bias.
  EXPECT_LT(bias[0], bias[E / 2]);
  EXPECT_LT(bias[E / 2], bias[E - 1]);
  EXPECT_NEAR(std::accumulate(bias.begin(), bias.end(), 0.0), 0.0, 1e-4);  // centred
}

}  // namespace
}  // namespace k3::model
