#include "k3/scaling/scaling_law.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "k3/base/error.h"
#include "k3/scaling/compute_optimal.h"

namespace k3::scaling {
namespace {

FitPoints random_points(LawForm form, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> log_n(15, 23), log_d(18, 28), loss(2, 5);
  std::vector<double> params, tokens, losses;
  for (size_t i = 0; i < n; ++i) {
    params.push_back(std::exp(log_n(rng)));
    tokens.push_back(std::exp(log_d(rng)));
    losses.push_back(loss(rng));
  }
  return make_fit_points(form, params, tokens, losses);
}

// Thetas across the start grid's range, where some points are in Huber's quadratic zone and
// some in its linear one.
TEST(FitObjective, GradientMatchesFiniteDifferences) {
  for (LawForm form : {LawForm::kParamsTokens, LawForm::kCompute}) {
    const FitPoints pts = random_points(form, 50, 3);
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> ab(3, 8), e(0.3, 1.2), exponent(0.1, 0.6);
    for (int trial = 0; trial < 20; ++trial) {
      const Theta t = {ab(rng), ab(rng), e(rng), exponent(rng), exponent(rng)};
      const double delta = trial % 2 ? 1e-3 : 0.5;  // mostly linear / mostly quadratic
      Theta grad{};
      fit_objective(pts, delta, t, grad);
      for (int p = 0; p < kParamCount; ++p) {
        const double h = 1e-6;
        Theta up = t, down = t;
        up[p] += h, down[p] -= h;
        const double numeric =
            (fit_objective(pts, delta, up) - fit_objective(pts, delta, down)) / (2 * h);
        EXPECT_NEAR(grad[p], numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
            << law_form_name(form) << " " << param_name(p) << " trial " << trial;
        if (!form_uses(form, p)) {
          EXPECT_EQ(grad[p], 0.0);
        }
      }
    }
  }
}

TEST(FitObjective, IsTheSumOfHuberOfTheLogResiduals) {
  const FitPoints pts = random_points(LawForm::kParamsTokens, 7, 5);
  const Theta t = {6, 7, 0.5, 0.35, 0.3};
  const ScalingLaw law = ScalingLaw::from_theta(LawForm::kParamsTokens, t);
  double expected = 0;
  const std::vector<double> r = log_residuals(pts, t);
  for (size_t i = 0; i < pts.size(); ++i) {
    const double direct = std::log(law.loss(std::exp(pts.x1[i]), std::exp(pts.x2[i])));
    EXPECT_NEAR(r[i], direct - pts.log_loss[i], 1e-12);
    expected += huber(r[i], 0.05);
  }
  EXPECT_NEAR(fit_objective(pts, 0.05, t), expected, 1e-12);
  EXPECT_DOUBLE_EQ(huber(0.5, 1.0), 0.125);  // quadratic inside delta
  EXPECT_DOUBLE_EQ(huber(-3.0, 1.0), 2.5);   // linear outside: delta (|r| - delta / 2)
}

// The closed form against a brute search over N along C = 6 N D, on a fine log grid.
TEST(ComputeOptimal, MatchesABruteSearchOverTheSplit) {
  const ScalingLaw laws[] = {{LawForm::kParamsTokens, 1.69, 406.4, 410.7, 0.34, 0.28},
                             {LawForm::kParamsTokens, 1.82, 514.0, 2115.2, 0.35, 0.37},
                             {LawForm::kParamsTokens, 2.0, 50.0, 9000.0, 0.6, 0.2}};
  for (const ScalingLaw& law : laws)
    for (double c : {1e19, 1e21, 1e23, 1e25}) {
      const ComputeOptimal o = compute_optimal(law, c);
      EXPECT_NEAR(6 * o.params * o.tokens / c, 1.0, 1e-12);
      double best_n = 0, best_loss = INFINITY;
      for (double log_n = 0; log_n <= 60; log_n += 1e-4) {
        const double n = std::exp(log_n), loss = law.loss(n, c / (6 * n));
        if (loss < best_loss) best_loss = loss, best_n = n;
      }
      EXPECT_NEAR(std::log(o.params), std::log(best_n), 2e-4) << law.alpha << " C " << c;
      EXPECT_LE(o.loss, best_loss + 1e-12);
      EXPECT_NEAR(o.loss, best_loss, 1e-9);
    }
}

TEST(ComputeOptimal, RefusesTheComputeFormAndNonPositiveExponents) {
  EXPECT_THROW(compute_optimal({LawForm::kCompute, 1.7, 400, 0, 0.3, 0}, 1e21), Error);
  EXPECT_THROW(compute_optimal({LawForm::kParamsTokens, 1.7, 400, 400, 0.3, 0}, 1e21), Error);
}

}  // namespace
}  // namespace k3::scaling
