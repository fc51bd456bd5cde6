#include "k3/kernels/fast_math.h"

#include <cmath>

#include "common/test_util.h"

namespace k3 {
namespace {

namespace fast = kernels::fast;

// Every float magnitude from 1e-30 to 100 (geometric steps), both signs.
std::vector<float> sweep() {
  std::vector<float> xs;
  for (double a = 1e-30; a < 100; a *= 1.001) {
    xs.push_back(static_cast<float>(a));
    xs.push_back(static_cast<float>(-a));
  }
  xs.push_back(0.0f);
  return xs;
}

// Relative error, absolute for tiny values: fast::exp flushes to zero below e^-87 = 1.6e-38.
double rel_error(double got, double want) {
  const double tiny = 1e-30;
  return std::abs(want) < tiny ? std::abs(got - want) / tiny
                               : std::abs(got - want) / std::abs(want);
}

TEST(FastMath, TanhAndSigmoidWithinOneMillionthRelative) {
  double worst_tanh = 0, worst_sigmoid = 0;
  for (float x : sweep()) {
    worst_tanh = std::max(worst_tanh, rel_error(fast::tanh(x), std::tanh(double(x))));
    worst_sigmoid =
        std::max(worst_sigmoid, rel_error(fast::sigmoid(x), 1 / (1 + std::exp(-double(x)))));
  }
  EXPECT_LT(worst_tanh, 1e-6);
  EXPECT_LT(worst_sigmoid, 1e-6);
  EXPECT_EQ(fast::tanh(1e4f), 1.0f);
  EXPECT_EQ(fast::tanh(-1e4f), -1.0f);
  EXPECT_EQ(fast::sigmoid(-1e4f), 0.0f);
  EXPECT_EQ(fast::sigmoid(1e4f), 1.0f);
}

TEST(FastMath, ExpOverItsRangeAndBeyond) {
  double worst = 0;
  for (float x = fast::kExpLo; x <= fast::kExpHi; x += 0.001f)
    worst = std::max(worst, rel_error(fast::exp(x), std::exp(double(x))));
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(fast::exp(0.0f), 1.0f);
  EXPECT_EQ(fast::exp(-1e30f), 0.0f);
  EXPECT_EQ(fast::exp(1e30f), INFINITY);
}

TEST(FastMath, SqrtWithinTwoUlp) {
  double worst = 0;
  for (double x = 1e-37; x < 1e37; x *= 1.0001)
    worst = std::max(worst, rel_error(fast::sqrt(static_cast<float>(x)),
                                      std::sqrt(double(static_cast<float>(x)))));
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(fast::sqrt(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(fast::sqrt(4.0f), 2.0f);
}

}  // namespace
}  // namespace k3
