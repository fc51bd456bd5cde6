#include "k3/scaling/fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/test_util.h"

namespace k3::scaling {
namespace {

// Chinchilla's published law (Hoffmann et al. 2022, approach 3).
constexpr double kTrueE = 1.69, kTrueA = 406.4, kTrueB = 410.7, kTrueAlpha = 0.34, kTrueBeta = 0.28;

// POINTS runs with N log-uniform on [1e7, 1e10], D on [1e8, 1e12], loss from the law times
// exp(noise * standard normal).
FitPoints synthetic(LawForm form, size_t points, double noise, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log10_n(7, 10), log10_d(8, 12);
  std::normal_distribution<double> normal;
  const ScalingLaw law{form,       kTrueE,   kTrueA, form == LawForm::kCompute ? 0 : kTrueB,
                       kTrueAlpha, kTrueBeta};
  std::vector<double> n, d, loss;
  for (size_t i = 0; i < points; ++i) {
    n.push_back(std::pow(10, log10_n(rng)));
    d.push_back(std::pow(10, log10_d(rng)));
    loss.push_back(law.loss(n.back(), d.back()) * std::exp(noise * normal(rng)));
  }
  return make_fit_points(form, n, d, loss);
}

// 3^5 = 243 starts spanning the Chinchilla grid's range: unit tests stay fast.
FitOptions reduced_grid() {
  FitOptions o;
  o.grid.override_axes("a=0:20:10,b=0:20:10,e=-1:1:1,alpha=0:1:0.5,beta=0:1:0.5");
  return o;
}

TEST(StartGrid, ChinchillaHas4500StartsEnumeratedBetaFastest) {
  FitOptions o;
  EXPECT_EQ(count_starts(o), 4500);
  EXPECT_EQ(start_theta(o, 0), (Theta{0, 0, -1, 0, 0}));
  EXPECT_EQ(start_theta(o, 1), (Theta{0, 0, -1, 0, 0.5}));
  EXPECT_EQ(start_theta(o, 4499), (Theta{25, 25, 1, 2, 2}));
  o.fixed[kAlpha] = 0.3;  // a fixed variable is one value, not an axis
  EXPECT_EQ(count_starts(o), 900);
  EXPECT_EQ(start_theta(o, 899)[kAlpha], 0.3);
  o.form = LawForm::kCompute;  // no b, beta axes
  EXPECT_EQ(count_starts(o), 30);
  o.grid.override_axes("a=1:2:0.25,e=0.5");
  EXPECT_EQ(o.grid.values[kLogA], (std::vector<double>{1, 1.25, 1.5, 1.75, 2}));
  EXPECT_EQ(o.grid.values[kLogE], (std::vector<double>{0.5}));
  EXPECT_NE(
      testing::error_of([&] { o.grid.override_axes("gamma=1"); }).find("unknown variable 'gamma'"),
      std::string::npos);
  EXPECT_NE(testing::error_of([&] { o.grid.override_axes("a=1:0:1"); }).find("FIRST <= LAST"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { o.grid.override_axes("a=x"); }).find("'x' is not a number"),
            std::string::npos);
}

// Spread of the estimates over seeds 1-20 (200 points, 1% noise, reduced grid), measured: the
// largest |E - 1.69| 0.043, alpha off by 0.017, beta by 0.010, log A by 0.27, log B by 0.18.
// The bounds below are about 1.5x those.
TEST(ScalingFit, RecoversTheLawFromNoisyRuns) {
  for (uint64_t seed : {1, 2, 3}) {
    const FitResult r =
        fit_scaling_law(synthetic(LawForm::kParamsTokens, 200, 0.01, seed), reduced_grid());
    const ScalingLaw law = r.law(LawForm::kParamsTokens);
    EXPECT_NEAR(law.E, kTrueE, 0.065) << seed;
    EXPECT_NEAR(law.alpha, kTrueAlpha, 0.025) << seed;
    EXPECT_NEAR(law.beta, kTrueBeta, 0.015) << seed;
    EXPECT_NEAR(std::log(law.A), std::log(kTrueA), 0.4) << seed;
    EXPECT_NEAR(std::log(law.B), std::log(kTrueB), 0.27) << seed;
    EXPECT_EQ(r.starts, 243);
  }
}

TEST(ScalingFit, RecoversExactlyWithoutNoise) {
  const FitResult r = fit_scaling_law(synthetic(LawForm::kParamsTokens, 100, 0, 4), reduced_grid());
  const ScalingLaw law = r.law(LawForm::kParamsTokens);
  EXPECT_NEAR(law.E, kTrueE, 1e-3);
  EXPECT_NEAR(law.alpha, kTrueAlpha, 1e-3);
  EXPECT_NEAR(law.beta, kTrueBeta, 1e-3);
  EXPECT_LT(r.objective, 1e-9);
}

TEST(ScalingFit, TheComputeFormRecoversItsLaw) {
  FitOptions o = reduced_grid();
  o.form = LawForm::kCompute;
  const FitResult r = fit_scaling_law(synthetic(LawForm::kCompute, 100, 0, 5), o);
  const ScalingLaw law = r.law(LawForm::kCompute);
  EXPECT_EQ(r.starts, 27);
  EXPECT_NEAR(law.E, kTrueE, 1e-3);
  EXPECT_NEAR(law.alpha, kTrueAlpha, 1e-3);
  EXPECT_NEAR(std::log(law.A), std::log(kTrueA), 1e-2);
}

TEST(ScalingFit, AFixedTermStaysAndTheOthersFit) {
  FitOptions o = reduced_grid();
  o.fixed[kLogE] = std::log(kTrueE);
  o.fixed[kAlpha] = kTrueAlpha;
  const FitResult r = fit_scaling_law(synthetic(LawForm::kParamsTokens, 100, 0, 6), o);
  EXPECT_EQ(r.theta[kLogE], std::log(kTrueE));
  EXPECT_EQ(r.theta[kAlpha], kTrueAlpha);
  EXPECT_EQ(r.starts, 243 / 9);
  EXPECT_NEAR(r.theta[kBeta], kTrueBeta, 1e-4);
  EXPECT_NEAR(r.theta[kLogB], std::log(kTrueB), 1e-3);
}

// The best start is chosen by objective, ties to the lower index, after all starts ran: the same
// bits on one thread and on four.
TEST(ScalingFit, TheResultDoesNotDependOnTheThreadCount) {
  const FitPoints pts = synthetic(LawForm::kParamsTokens, 150, 0.02, 8);
  FitResult one, four;
  {
    testing::ScopedThreads threads(1);
    one = fit_scaling_law(pts, reduced_grid());
  }
  {
    testing::ScopedThreads threads(4);
    four = fit_scaling_law(pts, reduced_grid());
  }
  EXPECT_EQ(one.theta, four.theta);
  EXPECT_EQ(one.objective, four.objective);
  EXPECT_EQ(one.best_start, four.best_start);
  ASSERT_EQ(one.best_minima.size(), four.best_minima.size());
  for (size_t i = 0; i < one.best_minima.size(); ++i)
    EXPECT_EQ(one.best_minima[i].start, four.best_minima[i].start);
}

// 95% intervals from 40 resamples cover the true values on noisy data, shrink with less noise,
// and do not depend on the thread count.
TEST(ScalingFit, BootstrapIntervalsCoverTheTruth) {
  const FitPoints pts = synthetic(LawForm::kParamsTokens, 150, 0.01, 9);
  const FitOptions o = reduced_grid();
  const FitResult full = fit_scaling_law(pts, o);
  std::vector<Theta> fits;
  {
    testing::ScopedThreads threads(2);
    fits = bootstrap_fits(pts, o, full, 40, 1);
  }
  const auto intervals = percentile_intervals(fits);
  const Theta truth = {std::log(kTrueA), std::log(kTrueB), std::log(kTrueE), kTrueAlpha, kTrueBeta};
  for (int p = 0; p < kParamCount; ++p) {
    EXPECT_LE(intervals[p].lo, truth[p]) << param_name(p);
    EXPECT_GE(intervals[p].hi, truth[p]) << param_name(p);
    EXPECT_LT(intervals[p].lo, intervals[p].hi) << param_name(p);
  }
  {
    testing::ScopedThreads threads(1);
    EXPECT_EQ(bootstrap_fits(pts, o, full, 40, 1), fits);
  }
  const FitPoints quiet = synthetic(LawForm::kParamsTokens, 150, 0.001, 9);
  const auto narrow =
      percentile_intervals(bootstrap_fits(quiet, o, fit_scaling_law(quiet, o), 40, 1));
  EXPECT_LT(narrow[kAlpha].hi - narrow[kAlpha].lo,
            0.5 * (intervals[kAlpha].hi - intervals[kAlpha].lo));
}

TEST(ScalingFit, OutliersAreThePointsFarFromTheMedianResidual) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0, 0.01);
  std::vector<double> r(100);
  for (double& v : r) v = normal(rng);
  r[17] = 0.2, r[64] = -0.15;
  EXPECT_EQ(outlier_indices(r, 5), (std::vector<size_t>{17, 64}));
  EXPECT_TRUE(outlier_indices(std::vector<double>(r.begin(), r.begin() + 10), 5).empty());
}

}  // namespace
}  // namespace k3::scaling
