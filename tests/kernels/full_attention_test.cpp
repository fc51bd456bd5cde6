// Attention both ways (the vision tower's, kernels/full_attention.h): the fp32 kernel against the
// plain reference in double with the causal mask off, the reference's backward against central
// finite differences, and the causal kernels refusing a non-causal shape.
#include "k3/kernels/full_attention.h"

#include <vector>

#include "common/test_util.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using kernels::AttentionShape;
using testing::cast_vec;
using testing::random_vec;

AttentionShape shape(int64_t B, int64_t T, int64_t H, int64_t dqk, int64_t dv) {
  AttentionShape s{.B = B, .T = T, .H = H, .dqk = dqk, .dr = 0, .dv = dv};
  s.causal = false;
  return s;
}

TEST(FullAttention, ForwardAndBackwardMatchReference) {
  for (const AttentionShape& s :
       {shape(1, 1, 1, 4, 4), shape(2, 16, 3, 8, 6), shape(3, 9, 2, 5, 7)}) {
    const auto n = static_cast<size_t>(s.B * s.T * s.H);
    const auto q = random_vec(n * s.dqk, 1, -2, 2), k = random_vec(n * s.dqk, 2, -2, 2),
               v = random_vec(n * s.dv, 3), dout = random_vec(n * s.dv, 4);
    std::vector<float> out(n * s.dv), p(static_cast<size_t>(s.B * s.H * s.T * s.T)), dq(n * s.dqk),
        dk(n * s.dqk), dv(n * s.dv),
        scratch(static_cast<size_t>(kernels::full_attention_scratch(s)));
    kernels::full_attention_forward(s, q.data(), k.data(), v.data(), out.data(), p.data());
    kernels::full_attention_backward(s, q.data(), k.data(), v.data(), p.data(), dout.data(),
                                     dq.data(), dk.data(), dv.data(), scratch.data());
    std::vector<double> out_r(n * s.dv), lse(n), dq_r(n * s.dqk), dk_r(n * s.dqk), dv_r(n * s.dv);
    const auto qd = cast_vec<double>(q), kd = cast_vec<double>(k), vd = cast_vec<double>(v);
    ref::attention_forward<double>(s, qd.data(), kd.data(), nullptr, vd.data(), out_r.data(),
                                   lse.data());
    ref::attention_backward<double>(s, qd.data(), kd.data(), nullptr, vd.data(),
                                    cast_vec<double>(dout).data(), dq_r.data(), dk_r.data(),
                                    nullptr, dv_r.data());
    K3_EXPECT_CLOSE(out, out_r, 1e-6, 1e-5);
    K3_EXPECT_CLOSE(dq, dq_r, 1e-6, 1e-4);
    K3_EXPECT_CLOSE(dk, dk_r, 1e-6, 1e-4);
    K3_EXPECT_CLOSE(dv, dv_r, 1e-6, 1e-4);
    // A later query sees the earlier keys and the earlier query the later ones.
    if (s.T > 1) {
      EXPECT_GT(p[1], 0.f);
    }
  }
}

TEST(FullAttention, ReferenceBackwardMatchesFiniteDifferences) {
  const AttentionShape s = shape(2, 5, 2, 3, 4);
  const auto n = static_cast<size_t>(s.B * s.T * s.H);
  const auto q = random_vec<double>(n * s.dqk, 5, -1, 1),
             k = random_vec<double>(n * s.dqk, 6, -1, 1), v = random_vec<double>(n * s.dv, 7),
             R = random_vec<double>(n * s.dv, 8);
  auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk,
                  const std::vector<double>& vv) {
    std::vector<double> out(n * s.dv), lse(n);
    ref::attention_forward<double>(s, qq.data(), kk.data(), nullptr, vv.data(), out.data(),
                                   lse.data());
    return testing::dot(out, R);
  };
  std::vector<double> dq(n * s.dqk), dk(n * s.dqk), dv(n * s.dv);
  ref::attention_backward<double>(s, q.data(), k.data(), nullptr, v.data(), R.data(), dq.data(),
                                  dk.data(), nullptr, dv.data());
  K3_EXPECT_CLOSE(dq, testing::finite_difference([&](auto& x) { return loss(x, k, v); }, q), 1e-7,
                  1e-5);
  K3_EXPECT_CLOSE(dk, testing::finite_difference([&](auto& x) { return loss(q, x, v); }, k), 1e-7,
                  1e-5);
  K3_EXPECT_CLOSE(dv, testing::finite_difference([&](auto& x) { return loss(q, k, x); }, v), 1e-7,
                  1e-5);
}

TEST(FullAttention, CausalKernelsRefuseIt) {
  const AttentionShape s = shape(1, 2, 1, 2, 2);
  std::vector<float> x(4), lse(2);
  const std::string e = testing::error_of([&] {
    kernels::attention_forward(s, x.data(), x.data(), nullptr, x.data(), x.data(), lse.data());
  });
  EXPECT_NE(e.find("causal"), std::string::npos) << e;
}

}  // namespace
}  // namespace k3
