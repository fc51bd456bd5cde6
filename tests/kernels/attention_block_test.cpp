// Block attention and the log-sum-exp merge (kernels/attention_block.h) composed as ring
// attention composes them, in one process: a sequence cut into 2·P chunks, each chunk's queries
// against its own keys by the causal kernel and against every earlier chunk's by block attention,
// merged; the backward of each pair given the merged out and lse. Outputs, lse and every gradient
// against the causal kernel over the whole sequence. MLA's shape: a per-head key part and a key
// part shared by every head.
//
// Tolerance: 1e-5 of each tensor's largest entry (fp32; the blocks' partial sums are merged in
// another order than the online softmax accumulates them).
#include "k3/kernels/attention_block.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/test_util.h"

namespace k3::kernels {
namespace {

using k3::testing::random_vec;

double max_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Rows [t0, t0 + n) of every batch row of x ([B, T, width]), and back.
std::vector<float> rows(const std::vector<float>& x, int64_t B, int64_t T, int64_t width,
                        int64_t t0, int64_t n) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b)
    out.insert(out.end(), x.begin() + (b * T + t0) * width, x.begin() + (b * T + t0 + n) * width);
  return out;
}
void add_rows(std::vector<float>& x, int64_t B, int64_t T, int64_t width, int64_t t0, int64_t n,
              const std::vector<float>& part) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n * width; ++i)
      x[static_cast<size_t>((b * T + t0) * width + i)] +=
          part[static_cast<size_t>(b * n * width + i)];
}
// lse [B, H, T]: its columns [t0, t0 + n).
std::vector<float> lse_cols(const std::vector<float>& l, int64_t B, int64_t H, int64_t T,
                            int64_t t0, int64_t n) {
  std::vector<float> out;
  for (int64_t bh = 0; bh < B * H; ++bh)
    out.insert(out.end(), l.begin() + bh * T + t0, l.begin() + bh * T + t0 + n);
  return out;
}

TEST(AttentionBlock, RingCompositionMatchesTheCausalKernel) {
  for (int64_t chunks : {4, 8}) {
    const int64_t B = 2, C = 40, T = chunks * C, H = 2;
    AttentionShape whole{B, T, H, 16, 8, 16, 0};
    const int64_t dq = whole.dqk + whole.dr;
    const auto q = random_vec(B * T * H * dq, 1), k = random_vec(B * T * H * whole.dqk, 2),
               kr = random_vec(B * T * whole.dr, 3), v = random_vec(B * T * H * whole.dv, 4),
               dout = random_vec(B * T * H * whole.dv, 5);
    std::vector<float> want(B * T * H * whole.dv), want_lse(B * H * T);
    attention_forward(whole, q.data(), k.data(), kr.data(), v.data(), want.data(), want_lse.data());
    std::vector<float> wdq(q.size()), wdk(k.size()), wdkr(kr.size()), wdv(v.size());
    attention_backward(whole, q.data(), k.data(), kr.data(), v.data(), want.data(), want_lse.data(),
                       dout.data(), wdq.data(), wdk.data(), wdkr.data(), wdv.data());

    AttentionShape chunk = whole;
    chunk.T = C;
    const auto part = [&](const std::vector<float>& x, int64_t width, int64_t c) {
      return rows(x, B, T, width, c * C, C);
    };
    std::vector<float> gdq(q.size(), 0.f), gdk(k.size(), 0.f), gdkr(kr.size(), 0.f),
        gdv(v.size(), 0.f);
    for (int64_t i = 0; i < chunks; ++i) {
      const auto qi = part(q, H * dq, i), doi = part(dout, H * whole.dv, i);
      const auto ki = part(k, H * whole.dqk, i), kri = part(kr, whole.dr, i),
                 vi = part(v, H * whole.dv, i);
      std::vector<float> out(B * C * H * whole.dv), lse(B * H * C), o2(out.size()), l2(lse.size());
      attention_forward(chunk, qi.data(), ki.data(), kri.data(), vi.data(), out.data(), lse.data());
      for (int64_t j = 0; j < i; ++j) {
        const auto kj = part(k, H * whole.dqk, j), krj = part(kr, whole.dr, j),
                   vj = part(v, H * whole.dv, j);
        attention_block_forward(whole, C, C, qi.data(), kj.data(), krj.data(), vj.data(), o2.data(),
                                l2.data());
        attention_merge(B, C, H, whole.dv, out.data(), lse.data(), o2.data(), l2.data());
      }
      EXPECT_LT(max_rel_error(out, part(want, H * whole.dv, i)), 1e-5) << "chunk " << i;
      EXPECT_LT(max_rel_error(lse, lse_cols(want_lse, B, H, T, i * C, C)), 1e-5) << "lse " << i;

      // The backward: the diagonal pair by the causal kernel, given the merged out and lse.
      std::vector<float> dqi(qi.size()), dki(ki.size()), dkri(kri.size()), dvi(vi.size());
      attention_backward(chunk, qi.data(), ki.data(), kri.data(), vi.data(), out.data(), lse.data(),
                         doi.data(), dqi.data(), dki.data(), dkri.data(), dvi.data());
      for (int64_t j = 0; j < i; ++j) {
        const auto kj = part(k, H * whole.dqk, j), krj = part(kr, whole.dr, j),
                   vj = part(v, H * whole.dv, j);
        std::vector<float> dkj(kj.size(), 0.f), dkrj(krj.size(), 0.f), dvj(vj.size(), 0.f);
        attention_block_backward(whole, C, C, qi.data(), kj.data(), krj.data(), vj.data(),
                                 out.data(), lse.data(), doi.data(), dqi.data(), dkj.data(),
                                 dkrj.data(), dvj.data());
        add_rows(gdk, B, T, H * whole.dqk, j * C, C, dkj);
        add_rows(gdkr, B, T, whole.dr, j * C, C, dkrj);
        add_rows(gdv, B, T, H * whole.dv, j * C, C, dvj);
      }
      add_rows(gdq, B, T, H * dq, i * C, C, dqi);
      add_rows(gdk, B, T, H * whole.dqk, i * C, C, dki);
      add_rows(gdkr, B, T, whole.dr, i * C, C, dkri);
      add_rows(gdv, B, T, H * whole.dv, i * C, C, dvi);
    }
    EXPECT_LT(max_rel_error(gdq, wdq), 1e-5) << "dq, " << chunks << " chunks";
    EXPECT_LT(max_rel_error(gdk, wdk), 1e-5) << "dk";
    EXPECT_LT(max_rel_error(gdkr, wdkr), 1e-5) << "dkr";
    EXPECT_LT(max_rel_error(gdv, wdv), 1e-5) << "dv";
  }
}

// Merging is symmetric and associative up to rounding: (a ⊕ b) ⊕ c against a ⊕ (c ⊕ b).
TEST(AttentionBlock, MergeIsOrderIndependent) {
  const int64_t B = 1, Tq = 5, H = 2, dv = 3, n = B * Tq * H * dv, m = B * H * Tq;
  std::vector<std::vector<float>> o, l;
  for (int i = 0; i < 3; ++i) {
    o.push_back(random_vec(n, 10 + i));
    l.push_back(random_vec(m, 20 + i, -3, 3));
  }
  std::vector<float> o1 = o[0], l1 = l[0], o2 = o[2], l2 = l[2];
  attention_merge(B, Tq, H, dv, o1.data(), l1.data(), o[1].data(), l[1].data());
  attention_merge(B, Tq, H, dv, o1.data(), l1.data(), o[2].data(), l[2].data());
  attention_merge(B, Tq, H, dv, o2.data(), l2.data(), o[1].data(), l[1].data());
  std::vector<float> o3 = o[0], l3 = l[0];
  attention_merge(B, Tq, H, dv, o3.data(), l3.data(), o2.data(), l2.data());
  EXPECT_LT(max_rel_error(o1, o3), 1e-6);
  EXPECT_LT(max_rel_error(l1, l3), 1e-6);
}

}  // namespace
}  // namespace k3::kernels
