// The per-head L2 norm of q/k and the gated output RMSNorm of KDA.
#include "common/test_util.h"
#include "k3/kernels/kda/head_norm.h"
#include "k3/kernels/kda/output_norm.h"
#include "k3/kernels/kda/reference.h"

namespace k3::kda_norms_test {
namespace {

using testing::cast_vec;
using testing::random_vec;

constexpr std::pair<int64_t, int64_t> kShapes[] = {{1, 1}, {3, 5}, {7, 64}, {300, 128}};

TEST(KdaL2Norm, ForwardAndBackwardMatchReference) {
  for (auto [rows, dim] : kShapes)
    for (float scale : {1.0f, 0.125f}) {
      const auto x = random_vec(rows * dim, rows + dim), dy = random_vec(rows * dim, 2);
      std::vector<float> y(x.size()), r(rows), dx(x.size());
      kernels::kda::l2norm_forward(x.data(), y.data(), r.data(), rows, dim, scale);
      kernels::kda::l2norm_backward(y.data(), r.data(), dy.data(), dx.data(), rows, dim, scale);
      std::vector<double> y_r(x.size()), r_r(rows), dx_r(x.size());
      ref::kda::l2norm_forward<double>(cast_vec<double>(x).data(), y_r.data(), r_r.data(), rows,
                                       dim, scale);
      ref::kda::l2norm_backward<double>(y_r.data(), r_r.data(), cast_vec<double>(dy).data(),
                                        dx_r.data(), rows, dim, scale);
      K3_EXPECT_CLOSE(y, y_r, 1e-6, 1e-5);
      K3_EXPECT_CLOSE(r, r_r, 1e-6, 1e-5);
      K3_EXPECT_CLOSE(dx, dx_r, 1e-5, 1e-4);
    }
}

TEST(KdaL2Norm, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, dim = 6;
  const double scale = 0.4;
  const auto x = random_vec<double>(rows * dim, 1), R = random_vec<double>(rows * dim, 2);
  auto loss = [&](const std::vector<double>& xx) {
    std::vector<double> y(xx.size()), r(rows);
    ref::kda::l2norm_forward<double>(xx.data(), y.data(), r.data(), rows, dim, scale);
    return testing::dot(y, R);
  };
  std::vector<double> y(x.size()), r(rows), dx(x.size());
  ref::kda::l2norm_forward<double>(x.data(), y.data(), r.data(), rows, dim, scale);
  ref::kda::l2norm_backward<double>(y.data(), r.data(), R.data(), dx.data(), rows, dim, scale);
  K3_EXPECT_CLOSE(dx, testing::finite_difference(loss, x), 1e-8, 1e-6);
}

TEST(KdaGatedRmsNorm, ForwardAndBackwardMatchReference) {
  const float eps = 1e-5f;
  for (auto [rows, dim] : kShapes) {
    const auto o = random_vec(rows * dim, 1), w = random_vec(dim, 2, 0.5, 1.5),
               gate = random_vec(rows * dim, 3, -4, 4), dy = random_vec(rows * dim, 4),
               dw0 = random_vec(dim, 5);
    std::vector<float> y(o.size()), rstd(rows), d_o(o.size()), dgate(o.size()), dw = dw0;
    kernels::kda::gated_rmsnorm_forward(o.data(), w.data(), gate.data(), y.data(), rstd.data(),
                                        rows, dim, eps);
    kernels::kda::gated_rmsnorm_backward(o.data(), w.data(), gate.data(), rstd.data(), dy.data(),
                                         d_o.data(), dw.data(), dgate.data(), rows, dim);
    const auto od = cast_vec<double>(o), wd = cast_vec<double>(w), gd = cast_vec<double>(gate);
    std::vector<double> y_r(o.size()), rstd_r(rows), do_r(o.size()), dgate_r(o.size()),
        dw_r = cast_vec<double>(dw0);
    ref::kda::gated_rmsnorm_forward<double>(od.data(), wd.data(), gd.data(), y_r.data(),
                                            rstd_r.data(), rows, dim, eps);
    ref::kda::gated_rmsnorm_backward<double>(od.data(), wd.data(), gd.data(), rstd_r.data(),
                                             cast_vec<double>(dy).data(), do_r.data(), dw_r.data(),
                                             dgate_r.data(), rows, dim);
    K3_EXPECT_CLOSE(y, y_r, 1e-6, 1e-5);
    K3_EXPECT_CLOSE(d_o, do_r, 1e-5, 1e-4);
    K3_EXPECT_CLOSE(dgate, dgate_r, 1e-6, 1e-5);
    K3_EXPECT_CLOSE(dw, dw_r, 1e-4, 1e-4);
  }
}

TEST(KdaGatedRmsNorm, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, dim = 5;
  const double eps = 1e-5;
  const auto o = random_vec<double>(rows * dim, 1), w = random_vec<double>(dim, 2, 0.5, 1.5),
             gate = random_vec<double>(rows * dim, 3, -3, 3), R = random_vec<double>(rows * dim, 4);
  auto loss = [&](const std::vector<double>& oo, const std::vector<double>& ww,
                  const std::vector<double>& gg) {
    std::vector<double> y(oo.size()), rstd(rows);
    ref::kda::gated_rmsnorm_forward<double>(oo.data(), ww.data(), gg.data(), y.data(), rstd.data(),
                                            rows, dim, eps);
    return testing::dot(y, R);
  };
  std::vector<double> y(o.size()), rstd(rows), d_o(o.size()), dgate(o.size()), dw(dim, 0.0);
  ref::kda::gated_rmsnorm_forward<double>(o.data(), w.data(), gate.data(), y.data(), rstd.data(),
                                          rows, dim, eps);
  ref::kda::gated_rmsnorm_backward<double>(o.data(), w.data(), gate.data(), rstd.data(), R.data(),
                                           d_o.data(), dw.data(), dgate.data(), rows, dim);
  K3_EXPECT_CLOSE(d_o,
                  testing::finite_difference([&](const auto& v) { return loss(v, w, gate); }, o),
                  1e-8, 1e-6);
  K3_EXPECT_CLOSE(dw,
                  testing::finite_difference([&](const auto& v) { return loss(o, v, gate); }, w),
                  1e-8, 1e-6);
  K3_EXPECT_CLOSE(dgate,
                  testing::finite_difference([&](const auto& v) { return loss(o, w, v); }, gate),
                  1e-8, 1e-6);
}

TEST(KdaGatedRmsNorm, WeightGradientIsIndependentOfThreadCount) {
  const int64_t rows = 800, dim = 128;
  const auto o = random_vec(rows * dim, 1), w = random_vec(dim, 2),
             gate = random_vec(rows * dim, 3), dy = random_vec(rows * dim, 4);
  std::vector<float> y(o.size()), rstd(rows);
  kernels::kda::gated_rmsnorm_forward(o.data(), w.data(), gate.data(), y.data(), rstd.data(), rows,
                                      dim, 1e-5f);
  auto dweight = [&](int threads) {
    testing::ScopedThreads scope(threads);
    std::vector<float> d_o(o.size()), dgate(o.size()), dw(dim, 0.0f);
    kernels::kda::gated_rmsnorm_backward(o.data(), w.data(), gate.data(), rstd.data(), dy.data(),
                                         d_o.data(), dw.data(), dgate.data(), rows, dim);
    return dw;
  };
  EXPECT_EQ(dweight(1), dweight(2));
}

}  // namespace
}  // namespace k3::kda_norms_test
