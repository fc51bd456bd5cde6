#include "k3/kernels/adamw.h"

#include <cmath>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using kernels::AdamWParams;
using testing::cast_vec;
using testing::random_vec;

TEST(AdamW, MatchesReferenceOverSteps) {
  for (int64_t n : {1, 13, 100003}) {  // the last runs in parallel
    AdamWParams p;
    p.lr = 3e-3f;
    p.grad_scale = 0.25f;
    auto param = random_vec(n, 1);
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    auto param_r = cast_vec<double>(param);
    std::vector<double> m_r(n, 0.0), v_r(n, 0.0);
    for (p.step = 1; p.step <= 5; ++p.step) {
      const auto g = random_vec(n, 10 + p.step, -3, 3);
      kernels::adamw_step(p, param.data(), g.data(), m.data(), v.data(), n);
      ref::adamw_step<double>(p, param_r.data(), cast_vec<double>(g).data(), m_r.data(), v_r.data(),
                              n);
    }
    K3_EXPECT_CLOSE(param, param_r, 1e-6, 1e-6);
    K3_EXPECT_CLOSE(m, m_r, 1e-7, 1e-5);
    K3_EXPECT_CLOSE(v, v_r, 1e-8, 1e-5);
  }
}

// At step 1 the bias corrections make m̂ = g and v̂ = g²: the step is lr (sign(g) + wd θ).
TEST(AdamW, FirstStepIsSignedLearningRate) {
  AdamWParams p;
  p.lr = 0.01f;
  p.eps = 0;
  p.weight_decay = 0.5f;
  p.grad_scale = 2.0f;
  std::vector<float> param = {1.0f, -2.0f}, grad = {0.3f, -7.0f}, m(2, 0.0f), v(2, 0.0f);
  kernels::adamw_step(p, param.data(), grad.data(), m.data(), v.data(), 2);
  EXPECT_NEAR(param[0], 1.0f - 0.01f * (1 + 0.5f * 1.0f), 1e-6);
  EXPECT_NEAR(param[1], -2.0f - 0.01f * (-1 + 0.5f * -2.0f), 1e-6);
  EXPECT_NEAR(m[0], 0.1f * 0.6f, 1e-7);
  EXPECT_NEAR(v[1], 0.05f * 196.0f, 1e-5);
}

TEST(AdamW, RejectsZeroStep) {
  AdamWParams p;
  p.step = 0;
  float x = 0, g = 0, m = 0, v = 0;
  EXPECT_THROW(kernels::adamw_step(p, &x, &g, &m, &v, 1), Error);
}

}  // namespace
}  // namespace k3
