#include "k3/scaling/lbfgs.h"

#include <gtest/gtest.h>

#include <cmath>

namespace k3::scaling {
namespace {

double rosenbrock(std::span<const double> x, std::span<double> g) {
  double f = 0;
  std::fill(g.begin(), g.end(), 0.0);
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double a = x[i + 1] - x[i] * x[i], b = 1 - x[i];
    f += 100 * a * a + b * b;
    g[i] += -400 * a * x[i] - 2 * b;
    g[i + 1] += 200 * a;
  }
  return f;
}

TEST(Lbfgs, FindsTheRosenbrockMinimum) {
  for (size_t n : {2, 5, 10}) {
    // The classic start in 2-D; from 0 in more dimensions (the chained function has a second,
    // local minimum near x_0 = -1 that starts at -1.2 may reach).
    std::vector<double> x0(n, 0.0);
    if (n == 2) x0 = {-1.2, 1.0};
    LbfgsOptions o;
    o.ftol = 0;  // stop on the gradient only
    o.gtol = 1e-9;
    const LbfgsResult r = lbfgs_minimize(rosenbrock, x0, o);
    EXPECT_EQ(r.stop, LbfgsStop::kGradient) << n << ": " << stop_name(r.stop);
    for (double v : r.x) EXPECT_NEAR(v, 1.0, 1e-8) << n;
    EXPECT_LT(r.f, 1e-16);
    // L-BFGS, not gradient descent: steepest descent needs thousands of steps here.
    EXPECT_LT(r.iterations, 60 * static_cast<int>(n)) << n;
  }
}

// f = 0.5 (x - c)' H (x - c) with H diagonal over three orders of magnitude: the minimum is c,
// and the inverse Hessian estimate must absorb the conditioning.
TEST(Lbfgs, FindsTheMinimumOfAnIllConditionedQuadratic) {
  const std::vector<double> h = {1, 10, 100, 1000}, c = {3, -2, 0.5, 7};
  auto quadratic = [&](std::span<const double> x, std::span<double> g) {
    double f = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      f += 0.5 * h[i] * (x[i] - c[i]) * (x[i] - c[i]);
      g[i] = h[i] * (x[i] - c[i]);
    }
    return f;
  };
  LbfgsOptions o;
  o.ftol = 0;
  o.gtol = 1e-10;
  const LbfgsResult r = lbfgs_minimize(quadratic, {0, 0, 0, 0}, o);
  EXPECT_EQ(r.stop, LbfgsStop::kGradient);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(r.x[i], c[i], 1e-10);
  EXPECT_LT(r.iterations, 30);
}

// Each accepted step meets the strong Wolfe conditions: recorded by wrapping the objective.
TEST(Lbfgs, AcceptedStepsDecreaseTheObjective) {
  std::vector<double> values;
  auto recorded = [&](std::span<const double> x, std::span<double> g) {
    const double f = rosenbrock(x, g);
    values.push_back(f);
    return f;
  };
  const LbfgsResult r = lbfgs_minimize(recorded, {-1.2, 1.0});
  EXPECT_EQ(r.evaluations, static_cast<int>(values.size()));
  EXPECT_LT(r.f, values.front());
  EXPECT_LE(r.f, *std::min_element(values.begin(), values.end()));
}

TEST(Lbfgs, StopsOnTheRelativeDecreaseRule) {
  LbfgsOptions o;
  o.ftol = 1e-3;
  o.gtol = 0;
  const LbfgsResult r = lbfgs_minimize(rosenbrock, {-1.2, 1.0}, o);
  EXPECT_EQ(r.stop, LbfgsStop::kRelativeDecrease);
  EXPECT_GT(r.f, 1e-12);  // stopped well before the minimum
}

TEST(Lbfgs, NonFiniteStartIsReported) {
  auto bad = [](std::span<const double>, std::span<double> g) {
    g[0] = 0;
    return NAN;
  };
  EXPECT_EQ(lbfgs_minimize(bad, {1.0}).stop, LbfgsStop::kNonFinite);
}

}  // namespace
}  // namespace k3::scaling
