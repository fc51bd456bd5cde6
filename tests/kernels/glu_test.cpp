#include "k3/kernels/glu.h"

#include "common/test_util.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using kernels::GluKind;
using kernels::GluParams;
using testing::cast_vec;
using testing::random_vec;

constexpr GluKind kKinds[] = {GluKind::SiTU, GluKind::SiLU};

// g spans the bend of the gate and its saturation; u spans SiTU's linear-looking range and beyond.
std::vector<float> gates(int64_t n, uint64_t seed) { return random_vec(n, seed, -12, 12); }
std::vector<float> ups(int64_t n, uint64_t seed) { return random_vec(n, seed, -60, 60); }

TEST(Glu, ForwardMatchesReference) {
  for (GluKind kind : kKinds)
    for (int64_t n : {1, 7, 1000, 100003}) {  // the last runs in parallel
      const GluParams p{kind};
      const auto g = gates(n, 1), u = ups(n, 2);
      std::vector<float> h(n);
      std::vector<double> h_r(n);
      kernels::glu_forward(p, g.data(), u.data(), h.data(), n);
      ref::glu_forward<double>(p, cast_vec<double>(g).data(), cast_vec<double>(u).data(),
                               h_r.data(), n);
      K3_EXPECT_CLOSE(h, h_r, 1e-6, 2e-6);
    }
}

TEST(Glu, SituSaturates) {
  // |h| < b1 * b2 and h ~ b2 tanh(u/b2) * b1 tanh(g/b1) for large g.
  const GluParams p;
  const std::vector<float> g = {1e4f, -1e4f}, u = {1e4f, 1e4f};
  std::vector<float> h(2);
  kernels::glu_forward(p, g.data(), u.data(), h.data(), 2);
  EXPECT_FLOAT_EQ(h[0], p.beta1 * p.beta2);
  EXPECT_EQ(h[1], 0.0f);
}

TEST(Glu, BackwardMatchesFiniteDifferencesAndReference) {
  const int64_t n = 64;
  for (GluKind kind : kKinds) {
    const GluParams p{kind};
    const auto g = cast_vec<double>(gates(n, 3)), u = cast_vec<double>(ups(n, 4));
    const auto R = random_vec<double>(n, 5);  // loss = <h, R>
    auto loss = [&](const std::vector<double>& gg, const std::vector<double>& uu) {
      std::vector<double> h(n);
      ref::glu_forward<double>(p, gg.data(), uu.data(), h.data(), n);
      return testing::dot(h, R);
    };
    // |loss| reaches ~100 here: a larger step keeps the rounding of the difference small.
    const auto fd_g =
        testing::finite_difference([&](const auto& gg) { return loss(gg, u); }, g, 1e-5);
    const auto fd_u =
        testing::finite_difference([&](const auto& uu) { return loss(g, uu); }, u, 1e-5);
    std::vector<double> dg(n), du(n);
    ref::glu_backward<double>(p, g.data(), u.data(), R.data(), dg.data(), du.data(), n);
    K3_EXPECT_CLOSE(dg, fd_g, 1e-8, 1e-6);
    K3_EXPECT_CLOSE(du, fd_u, 1e-8, 1e-6);
  }
}

TEST(Glu, FastBackwardMatchesReference) {
  for (GluKind kind : kKinds)
    for (int64_t n : {1, 7, 1000, 100003}) {
      const GluParams p{kind};
      const auto g = gates(n, 6), u = ups(n, 7), dh = random_vec(n, 8);
      std::vector<float> dg(n), du(n);
      std::vector<double> dg_r(n), du_r(n);
      kernels::glu_backward(p, g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
      ref::glu_backward<double>(p, cast_vec<double>(g).data(), cast_vec<double>(u).data(),
                                cast_vec<double>(dh).data(), dg_r.data(), du_r.data(), n);
      // Where act'(g) crosses zero two terms of size ~|dh u| cancel: fp32 rounding of those terms
      // (|u| up to 60) sets the absolute tolerance.
      K3_EXPECT_CLOSE(dg, dg_r, 1e-5, 2e-6);
      K3_EXPECT_CLOSE(du, du_r, 1e-5, 2e-6);
    }
}

}  // namespace
}  // namespace k3
