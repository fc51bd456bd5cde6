#include "k3/optim/clip.h"

#include <cmath>

#include "common/test_util.h"
#include "k3/base/error.h"

namespace k3::optim {
namespace {

TEST(Clip, NormIsTheSameOnAnyThreadCount) {
  const auto g = testing::random_vec(300001, 5);
  double expected = 0;
  for (float x : g) expected += static_cast<double>(x) * x;
  const double one = [&] {
    testing::ScopedThreads t(1);
    return global_grad_norm(g.data(), g.size());
  }();
  EXPECT_EQ(one, global_grad_norm(g.data(), g.size()));
  EXPECT_NEAR(one, std::sqrt(expected), 1e-9 * one);
}

TEST(Clip, FactorBringsTheNormDownToTheLimit) {
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_factor(4.0, 0.0), 1.0f);  // 0 disables clipping
  EXPECT_NEAR(clip_factor(4.0, 1.0), 0.25f, 1e-6);
}

TEST(StepGuard, SkipsNonFiniteStepsAndStopsAfterFiveInARow) {
  StepGuard guard;
  EXPECT_TRUE(guard.admit(2.0, 1.0));
  EXPECT_FALSE(guard.admit(NAN, 1.0));
  EXPECT_FALSE(guard.admit(2.0, INFINITY));
  EXPECT_TRUE(guard.admit(2.0, 1.0));  // a good step resets the run of bad ones
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(guard.admit(NAN, NAN));
  EXPECT_EQ(guard.skipped(), 6);
  try {
    guard.admit(NAN, 1.0);
    ADD_FAILURE() << "the fifth bad step in a row must stop the run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 steps in a row"), std::string::npos) << e.what();
  }
}

TEST(StepGuard, SkippedCountSurvivesARestore) {
  StepGuard guard;
  guard.set_skipped(3);
  EXPECT_FALSE(guard.admit(NAN, 0));
  EXPECT_EQ(guard.skipped(), 4);
}

}  // namespace
}  // namespace k3::optim
