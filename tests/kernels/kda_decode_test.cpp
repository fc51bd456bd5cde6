// The fused decode step against the KDA references composed one token at a time in double:
// short conv with windows, L2 norms, gate, β, the recurrent delta rule from the carried state, and
// the gated output norm.
#include <cmath>

#include "common/test_util.h"
#include "k3/kernels/kda/decode.h"
#include "k3/kernels/kda/delta_rule.h"
#include "k3/kernels/kda/reference.h"

namespace k3::kda_decode_test {
namespace {

using testing::cast_vec;
using testing::random_vec;
namespace kda = kernels::kda;

struct Problem {
  int64_t B = 2, H = 3, D = 16, Kc = 4, steps = 9;
  int64_t P() const { return H * D; }
  int64_t W() const { return B * (Kc - 1) * P(); }
};

TEST(KdaDecode, StepsMatchComposedReferences) {
  for (bool bounded : {true, false}) {
    Problem pb;
    const int64_t B = pb.B, H = pb.H, D = pb.D, P = pb.P(), Kc = pb.Kc;
    const float eps = 1e-5f;
    // Parameters, starting windows and states, and each step's projections.
    const auto qw = random_vec(P * Kc, 1), kw = random_vec(P * Kc, 2), vw = random_vec(P * Kc, 3);
    const auto A_log = random_vec(H, 4), dt_bias = random_vec(P, 5, -2, 1),
               onorm = random_vec(D, 6, 0.5, 1.5);
    auto windows = random_vec(3 * pb.W(), 7);
    auto S = random_vec(B * H * D * D, 8, -0.3, 0.3);
    const auto tokens = random_vec(pb.steps * B * (5 * P + H), 9, -2, 2);

    kda::DecodeParams p;
    p.H = H;
    p.D = D;
    p.conv_kernel = Kc;
    p.bounded_gate = bounded;
    p.gate_lower_bound = -5.0f;
    p.norm_eps = eps;
    p.q_conv = qw.data();
    p.k_conv = kw.data();
    p.v_conv = vw.data();
    p.A_log = A_log.data();
    p.dt_bias = dt_bias.data();
    p.o_norm = onorm.data();

    std::vector<double> win_r = cast_vec<double>(windows), S_r = cast_vec<double>(S);
    const auto qwd = cast_vec<double>(qw), kwd = cast_vec<double>(kw), vwd = cast_vec<double>(vw),
               A_d = cast_vec<double>(A_log), dt_d = cast_vec<double>(dt_bias),
               on_d = cast_vec<double>(onorm);
    for (int64_t t = 0; t < pb.steps; ++t) {
      const float* tok = tokens.data() + t * B * (5 * P + H);
      const float *q = tok, *k = q + B * P, *v = k + B * P, *f = v + B * P, *gate = f + B * P,
                  *bl = gate + B * P;
      std::vector<float> y(B * P);
      std::vector<kda::DecodeState> states;
      for (int64_t b = 0; b < B; ++b)  // each sequence's windows and state in the batch's buffers
        states.push_back({windows.data() + b * pb.W() / B, windows.data() + pb.W() + b * pb.W() / B,
                          windows.data() + 2 * pb.W() + b * pb.W() / B, S.data() + b * H * D * D});
      kda::decode_step(p, {q, k, v, f, gate, bl}, states, y.data());

      // The same token through the references.
      const kda::ShortConvShape cs{B, 1, P, Kc, {}};
      std::vector<double> qc(B * P), kc(B * P), vc(B * P), rn(B * H);
      const double* wts[] = {qwd.data(), kwd.data(), vwd.data()};
      const float* ins[] = {q, k, v};
      double* outs[] = {qc.data(), kc.data(), vc.data()};
      for (int i = 0; i < 3; ++i) {
        double* w = win_r.data() + i * pb.W();
        const std::vector<double> in = cast_vec<double>(std::vector<float>(ins[i], ins[i] + B * P));
        const std::vector<double> before(w, w + pb.W());
        ref::kda::short_conv_forward<double>(cs, in.data(), wts[i], before.data(), outs[i], w);
      }
      ref::kda::l2norm_forward<double>(qc.data(), qc.data(), rn.data(), B * H, D,
                                       1 / std::sqrt(double(D)));
      ref::kda::l2norm_forward<double>(kc.data(), kc.data(), rn.data(), B * H, D, 1.0);
      std::vector<double> g(B * P), beta(B * H), o(B * P), y_r(B * P), rstd(B * H);
      const kda::GateParams gp{B, H, D, bounded, -5.0f};
      ref::kda::gate_forward<double>(gp, cast_vec<double>(std::vector<float>(f, f + B * P)).data(),
                                     A_d.data(), dt_d.data(), g.data());
      for (int64_t i = 0; i < B * H; ++i) beta[i] = 1 / (1 + std::exp(-double(bl[i])));
      const std::vector<double> S_before = S_r;
      kda::recurrent_forward<double>(
          {B, 1, H, D, D, {}},
          {qc.data(), kc.data(), vc.data(), g.data(), beta.data(), S_before.data()}, o.data(),
          S_r.data());
      ref::kda::gated_rmsnorm_forward<double>(
          o.data(), on_d.data(), cast_vec<double>(std::vector<float>(gate, gate + B * P)).data(),
          y_r.data(), rstd.data(), B * H, D, eps);
      K3_EXPECT_CLOSE(y, y_r, 1e-5, 1e-4);
    }
    K3_EXPECT_CLOSE(S, S_r, 1e-5, 1e-4);
    K3_EXPECT_CLOSE(windows, win_r, 1e-30, 0);  // copies of the inputs
  }
}

}  // namespace
}  // namespace k3::kda_decode_test
