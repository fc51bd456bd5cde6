#include "k3/kernels/rmsnorm.h"

#include "common/test_util.h"
#include "k3/kernels/reference.h"

namespace k3::rmsnorm_test {
namespace {

using testing::cast_vec;
using testing::random_vec;

struct Shape2 {
  int64_t rows, dim;
};
constexpr Shape2 kShapes[] = {{1, 1}, {3, 1}, {1, 17}, {7, 130}, {64, 768}};
constexpr float kEps = 1e-6f;

TEST(RmsNorm, ForwardMatchesReference) {
  for (const auto [rows, dim] : kShapes)
    for (bool weighted : {true, false}) {
      const auto x = random_vec(rows * dim, rows + dim), w = random_vec(dim, 2, 0.5, 1.5);
      const float* wp = weighted ? w.data() : nullptr;
      std::vector<float> y(rows * dim), rstd(rows);
      std::vector<double> y_r(rows * dim), rstd_r(rows);
      kernels::rmsnorm_forward(x.data(), wp, y.data(), rstd.data(), rows, dim, kEps);
      ref::rmsnorm_forward<double>(cast_vec<double>(x).data(),
                                   weighted ? cast_vec<double>(w).data() : nullptr, y_r.data(),
                                   rstd_r.data(), rows, dim, kEps);
      K3_EXPECT_CLOSE(y, y_r, 1e-6, 1e-5);
      K3_EXPECT_CLOSE(rstd, rstd_r, 1e-6, 1e-5);
    }
}

// loss = <y, R>; gradients with respect to x and w by finite differences of the double reference.
TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndReference) {
  for (const auto [rows, dim] : {Shape2{1, 1}, Shape2{3, 5}, Shape2{4, 16}})
    for (bool weighted : {true, false}) {
      const auto x = random_vec<double>(rows * dim, 1), w = random_vec<double>(dim, 2, 0.5, 1.5);
      const auto R = random_vec<double>(rows * dim, 3);
      const double* wp = weighted ? w.data() : nullptr;
      auto forward = [&](const std::vector<double>& xx, const double* ww) {
        std::vector<double> y(rows * dim), rstd(rows);
        ref::rmsnorm_forward<double>(xx.data(), ww, y.data(), rstd.data(), rows, dim, kEps);
        return testing::dot(y, R);
      };
      const auto fd_x =
          testing::finite_difference([&](const auto& xx) { return forward(xx, wp); }, x);
      const auto fd_w =
          testing::finite_difference([&](const auto& ww) { return forward(x, ww.data()); }, w);

      std::vector<double> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 0.0);
      ref::rmsnorm_forward<double>(x.data(), wp, y.data(), rstd.data(), rows, dim, kEps);
      ref::rmsnorm_backward<double>(x.data(), wp, rstd.data(), R.data(), dx.data(), dw.data(), rows,
                                    dim);
      K3_EXPECT_CLOSE(dx, fd_x, 1e-7, 1e-6);
      if (weighted) {
        K3_EXPECT_CLOSE(dw, fd_w, 1e-7, 1e-6);
      }

      const auto xf = cast_vec<float>(x), wf = cast_vec<float>(w), Rf = cast_vec<float>(R);
      std::vector<float> yf(rows * dim), rstdf(rows), dxf(rows * dim), dwf(dim, 0.0f);
      const float* wfp = weighted ? wf.data() : nullptr;
      kernels::rmsnorm_forward(xf.data(), wfp, yf.data(), rstdf.data(), rows, dim, kEps);
      kernels::rmsnorm_backward(xf.data(), wfp, rstdf.data(), Rf.data(), dxf.data(), dwf.data(),
                                rows, dim);
      K3_EXPECT_CLOSE(dxf, dx, 1e-5, 1e-4);
      if (weighted) {
        K3_EXPECT_CLOSE(dwf, dw, 1e-5, 1e-4);
      }
    }
}

TEST(RmsNorm, FastBackwardMatchesReferenceOnLargerShapes) {
  for (const auto [rows, dim] : kShapes) {
    const auto x = random_vec(rows * dim, 5), w = random_vec(dim, 6, 0.5, 1.5),
               dy = random_vec(rows * dim, 7);
    const auto dw0 = random_vec(dim, 8);  // dweight accumulates
    std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim), dw = dw0;
    kernels::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
    kernels::rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(),
                              rows, dim);
    const auto xd = cast_vec<double>(x), wd = cast_vec<double>(w);
    std::vector<double> y_r(rows * dim), rstd_r(rows), dx_r(rows * dim),
        dw_r = cast_vec<double>(dw0);
    ref::rmsnorm_forward<double>(xd.data(), wd.data(), y_r.data(), rstd_r.data(), rows, dim, kEps);
    ref::rmsnorm_backward<double>(xd.data(), wd.data(), rstd_r.data(), cast_vec<double>(dy).data(),
                                  dx_r.data(), dw_r.data(), rows, dim);
    K3_EXPECT_CLOSE(dx, dx_r, 1e-5, 1e-4);
    K3_EXPECT_CLOSE(dw, dw_r, 1e-5, 1e-4);
  }
}

TEST(RmsNorm, DweightIsIndependentOfThreadCount) {
  const int64_t rows = 600, dim = 100;
  const auto x = random_vec(rows * dim, 1), w = random_vec(dim, 2), dy = random_vec(rows * dim, 3);
  std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim);
  kernels::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
  auto dweight = [&](int threads) {
    testing::ScopedThreads t(threads);
    std::vector<float> dw(dim, 0.0f);
    kernels::rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(),
                              rows, dim);
    return dw;
  };
  const auto one = dweight(1), two = dweight(2);
  EXPECT_EQ(one, two);
  EXPECT_EQ(two, dweight(2));
}

}  // namespace
}  // namespace k3::rmsnorm_test
