// The sigmoid output gate y = x ⊙ sigmoid(g) of gated MLA and the gated attention: the fast fp32
// kernel against the plain reference in double, and both backward passes against central finite
// differences of the double forward.
#include "common/test_util.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/reference.h"

namespace k3::sigmoid_gate_test {
namespace {

using testing::cast_vec;
using testing::random_vec;

// g spans the bend of the sigmoid and both saturations (exp(-g) overflows fp32 below g ≈ -88).
std::vector<float> gates(int64_t n, uint64_t seed) { return random_vec(n, seed, -100, 30); }
std::vector<float> inputs(int64_t n, uint64_t seed) { return random_vec(n, seed, -3, 3); }

TEST(SigmoidGate, ForwardMatchesReference) {
  for (int64_t n : {1, 7, 1000, 100003}) {  // the last runs in parallel
    const auto x = inputs(n, 1), g = gates(n, 2);
    std::vector<float> y(n);
    std::vector<double> y_r(n);
    kernels::sigmoid_gate_forward(x.data(), g.data(), y.data(), n);
    ref::sigmoid_gate_forward<double>(cast_vec<double>(x).data(), cast_vec<double>(g).data(),
                                      y_r.data(), n);
    // A few roundings of fp32 arithmetic.
    K3_EXPECT_CLOSE(y, y_r, 1e-30, 1e-6);
    // Decoding gates its attention output in place (y aliasing x).
    std::vector<float> in_place = x;
    kernels::sigmoid_gate_forward(in_place.data(), g.data(), in_place.data(), n);
    EXPECT_EQ(in_place, y);
  }
}

TEST(SigmoidGate, HalfOpenGateAtZero) {
  const std::vector<float> x = {2.f, -6.f}, g = {0.f, 0.f}, dy = {1.f, 0.5f};
  std::vector<float> y(2), dx(2), dg(2);
  kernels::sigmoid_gate_forward(x.data(), g.data(), y.data(), 2);
  kernels::sigmoid_gate_backward(x.data(), g.data(), dy.data(), dx.data(), dg.data(), 2);
  // sigmoid(0) = 1/2 and sigmoid'(0) = 1/4, all exact in fp32.
  EXPECT_EQ(y, (std::vector<float>{1.f, -3.f}));
  EXPECT_EQ(dx, (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(dg, (std::vector<float>{0.5f, -0.75f}));
}

TEST(SigmoidGate, BackwardMatchesFiniteDifferences) {
  const int64_t n = 64;
  // The bend of the sigmoid, where finite differences in double are accurate.
  const auto x = random_vec<double>(n, 3, -3, 3), g = random_vec<double>(n, 4, -8, 8);
  const auto R = random_vec<double>(n, 5);  // loss = <y, R>
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& gg) {
    std::vector<double> y(n);
    ref::sigmoid_gate_forward<double>(xx.data(), gg.data(), y.data(), n);
    return testing::dot(y, R);
  };
  const auto fd_x = testing::finite_difference([&](const auto& xx) { return loss(xx, g); }, x);
  const auto fd_g = testing::finite_difference([&](const auto& gg) { return loss(x, gg); }, g);
  std::vector<double> dx(n), dg(n);
  ref::sigmoid_gate_backward<double>(x.data(), g.data(), R.data(), dx.data(), dg.data(), n);
  // Step 1e-6 on a loss of size ~10: the difference keeps ~1e-9 of rounding.
  K3_EXPECT_CLOSE(dx, fd_x, 1e-8, 1e-6);
  K3_EXPECT_CLOSE(dg, fd_g, 1e-8, 1e-6);
  // The fast kernel too, against the same differences (not only against the reference).
  std::vector<float> dx_f(n), dg_f(n);
  kernels::sigmoid_gate_backward(cast_vec<float>(x).data(), cast_vec<float>(g).data(),
                                 cast_vec<float>(R).data(), dx_f.data(), dg_f.data(), n);
  // fp32 inputs and arithmetic: a few 1e-7 relative.
  K3_EXPECT_CLOSE(dx_f, fd_x, 1e-6, 1e-5);
  K3_EXPECT_CLOSE(dg_f, fd_g, 1e-6, 1e-5);
}

TEST(SigmoidGate, FastBackwardMatchesReference) {
  for (int64_t n : {1, 7, 1000, 100003}) {
    const auto x = inputs(n, 6), g = gates(n, 7), dy = random_vec(n, 8);
    std::vector<float> dx(n), dg(n);
    std::vector<double> dx_r(n), dg_r(n);
    kernels::sigmoid_gate_backward(x.data(), g.data(), dy.data(), dx.data(), dg.data(), n);
    ref::sigmoid_gate_backward<double>(cast_vec<double>(x).data(), cast_vec<double>(g).data(),
                                       cast_vec<double>(dy).data(), dx_r.data(), dg_r.data(), n);
    K3_EXPECT_CLOSE(dx, dx_r, 1e-30, 1e-6);
    // For large g, 1 − sigmoid(g) comes from 1 + exp(−g) rounded in fp32: its error reaches an
    // ulp of 1 (1.2e-7), times |dy x| ≤ 3, absolute.
    K3_EXPECT_CLOSE(dg, dg_r, 4e-7, 1e-5);
  }
}

}  // namespace
}  // namespace k3::sigmoid_gate_test
