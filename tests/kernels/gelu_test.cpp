// GELU, exact (erf) and in its tanh form (the vision tower's MLP and projector): the fp32 kernel
// against the plain reference in double, the reference's derivative against central finite
// differences, and known values.
#include <vector>

#include "common/test_util.h"
#include "k3/kernels/elementwise.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using testing::cast_vec;
using testing::random_vec;

TEST(Gelu, ForwardMatchesReferenceAndBackwardFiniteDifferences) {
  for (bool tanh : {false, true}) {
    SCOPED_TRACE(tanh ? "tanh" : "erf");
    const int64_t n = 257;
    const auto x = random_vec(n, 9, -6, 6), dy = random_vec(n, 10);
    std::vector<float> y(n), dx(n);
    kernels::gelu_forward(x.data(), y.data(), n, tanh);
    kernels::gelu_backward(x.data(), dy.data(), dx.data(), n, tanh);
    std::vector<double> y_r(n), dx_r(n);
    const auto xd = cast_vec<double>(x), dyd = cast_vec<double>(dy);
    ref::gelu_forward<double>(xd.data(), y_r.data(), n, tanh);
    ref::gelu_backward<double>(xd.data(), dyd.data(), dx_r.data(), n, tanh);
    K3_EXPECT_CLOSE(y, y_r, 1e-6, 1e-5);
    K3_EXPECT_CLOSE(dx, dx_r, 1e-6, 1e-5);
    auto f = [&](const std::vector<double>& in) {
      std::vector<double> out(n);
      ref::gelu_forward<double>(in.data(), out.data(), n, tanh);
      return testing::dot(out, dyd);
    };
    K3_EXPECT_CLOSE(dx_r, testing::finite_difference(f, xd), 1e-7, 1e-6);
  }
  // The two forms agree to about 1e-3 and GELU(0) = 0, GELU(x) → x for large x.
  const std::vector<float> x = {0.f, 1.f, 8.f};
  std::vector<float> e(3), t(3);
  kernels::gelu_forward(x.data(), e.data(), 3, false);
  kernels::gelu_forward(x.data(), t.data(), 3, true);
  EXPECT_EQ(e[0], 0.f);
  EXPECT_NEAR(e[1], 0.841345f, 1e-6);
  EXPECT_NEAR(t[1], e[1], 1e-3);
  EXPECT_NEAR(e[2], 8.f, 1e-6);
}

}  // namespace
}  // namespace k3
