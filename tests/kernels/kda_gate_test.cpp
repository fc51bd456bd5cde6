#include "common/test_util.h"
#include "k3/kernels/kda/gate.h"
#include "k3/kernels/kda/reference.h"

namespace k3 {
namespace {

using kernels::kda::GateParams;
using testing::cast_vec;
using testing::random_vec;

GateParams params(int64_t rows, int64_t H, int64_t D, bool bounded) {
  return GateParams{rows, H, D, bounded, -5.0f};
}

struct Inputs {
  std::vector<double> f, A_log, dt_bias;
};

Inputs random_inputs(const GateParams& p, uint64_t seed) {
  return {random_vec<double>(p.rows * p.H * p.D, seed, -4, 4), random_vec<double>(p.H, seed + 1),
          random_vec<double>(p.H * p.D, seed + 2, -3, 1)};
}

TEST(KdaGate, ForwardMatchesReference) {
  for (bool bounded : {true, false})
    for (auto [rows, H, D] : {std::tuple{1, 1, 1}, {3, 2, 5}, {17, 3, 64}, {40, 4, 128}}) {
      const GateParams p = params(rows, H, D, bounded);
      const Inputs in = random_inputs(p, rows + D);
      std::vector<double> g_r(in.f.size());
      ref::kda::gate_forward<double>(p, in.f.data(), in.A_log.data(), in.dt_bias.data(),
                                     g_r.data());
      std::vector<float> g(in.f.size());
      kernels::kda::gate_forward(p, cast_vec<float>(in.f).data(), cast_vec<float>(in.A_log).data(),
                                 cast_vec<float>(in.dt_bias).data(), g.data());
      K3_EXPECT_CLOSE(g, g_r, 1e-6, 1e-5);
      for (double v : g_r) {
        EXPECT_LE(v, 0.0);
        if (bounded) {
          EXPECT_GT(v, -5.0);
        }
      }
    }
}

// loss = <g, R>: the reference backward against central differences, then the fast backward
// (accumulating onto nonzero parameter gradients) against the reference.
TEST(KdaGate, BackwardMatchesFiniteDifferencesAndReference) {
  for (bool bounded : {true, false}) {
    const GateParams p = params(4, 3, 5, bounded);
    const Inputs in = random_inputs(p, 7);
    const auto R = random_vec<double>(in.f.size(), 8);
    auto loss = [&](const std::vector<double>& f, const std::vector<double>& a,
                    const std::vector<double>& dt) {
      std::vector<double> g(f.size());
      ref::kda::gate_forward<double>(p, f.data(), a.data(), dt.data(), g.data());
      return testing::dot(g, R);
    };
    const auto fd_f = testing::finite_difference(
        [&](const auto& f) { return loss(f, in.A_log, in.dt_bias); }, in.f);
    const auto fd_a = testing::finite_difference(
        [&](const auto& a) { return loss(in.f, a, in.dt_bias); }, in.A_log);
    const auto fd_dt = testing::finite_difference(
        [&](const auto& dt) { return loss(in.f, in.A_log, dt); }, in.dt_bias);

    const auto da0 = random_vec<double>(p.H, 9), ddt0 = random_vec<double>(p.H * p.D, 10);
    std::vector<double> df(in.f.size()), da(p.H, 0.0), ddt(p.H * p.D, 0.0);
    ref::kda::gate_backward<double>(p, in.f.data(), in.A_log.data(), in.dt_bias.data(), R.data(),
                                    df.data(), da.data(), ddt.data());
    K3_EXPECT_CLOSE(df, fd_f, 1e-8, 1e-6);
    K3_EXPECT_CLOSE(da, fd_a, 1e-8, 1e-6);
    K3_EXPECT_CLOSE(ddt, fd_dt, 1e-8, 1e-6);

    std::vector<float> dff(in.f.size()), daf = cast_vec<float>(da0), ddtf = cast_vec<float>(ddt0);
    kernels::kda::gate_backward(p, cast_vec<float>(in.f).data(), cast_vec<float>(in.A_log).data(),
                                cast_vec<float>(in.dt_bias).data(), cast_vec<float>(R).data(),
                                dff.data(), daf.data(), ddtf.data());
    for (size_t i = 0; i < da.size(); ++i) da[i] += da0[i];
    for (size_t i = 0; i < ddt.size(); ++i) ddt[i] += ddt0[i];
    K3_EXPECT_CLOSE(dff, df, 1e-6, 1e-5);
    K3_EXPECT_CLOSE(daf, da, 1e-5, 1e-5);
    K3_EXPECT_CLOSE(ddtf, ddt, 1e-5, 1e-5);
  }
}

TEST(KdaGate, ParameterGradientsAreIndependentOfThreadCount) {
  for (bool bounded : {true, false}) {
    const GateParams p = params(300, 4, 64, bounded);
    const Inputs in = random_inputs(p, 3);
    const auto f = cast_vec<float>(in.f), a = cast_vec<float>(in.A_log),
               dt = cast_vec<float>(in.dt_bias), dg = random_vec(in.f.size(), 4);
    auto grads = [&](int threads) {
      testing::ScopedThreads scope(threads);
      std::vector<float> df(f.size()), da(p.H, 0.0f), ddt(p.H * p.D, 0.0f);
      kernels::kda::gate_backward(p, f.data(), a.data(), dt.data(), dg.data(), df.data(), da.data(),
                                  ddt.data());
      da.insert(da.end(), ddt.begin(), ddt.end());
      return da;
    };
    EXPECT_EQ(grads(1), grads(2));
  }
}

}  // namespace
}  // namespace k3
