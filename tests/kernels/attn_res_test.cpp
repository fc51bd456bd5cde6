#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "k3/kernels/attn_res.h"
#include "k3/kernels/reference.h"

namespace k3 {
namespace {

using testing::cast_vec;
using testing::random_vec;

struct Case {
  int64_t n, N, d;
  std::vector<std::vector<float>> rows;
  std::vector<float> nw, pw, dout;
  Case(int64_t n_, int64_t N_, int64_t d_, uint64_t seed) : n(n_), N(N_), d(d_) {
    for (int64_t i = 0; i < n; ++i) rows.push_back(random_vec(static_cast<size_t>(N * d), seed + i, -2, 2));
    nw = random_vec(static_cast<size_t>(d), seed + 100, 0.5, 1.5);
    pw = random_vec(static_cast<size_t>(d), seed + 101, -1, 1);
    dout = random_vec(static_cast<size_t>(N * d), seed + 102);
  }
  std::vector<const float*> ptrs() const {
    std::vector<const float*> p;
    for (auto& r : rows) p.push_back(r.data());
    return p;
  }
};

TEST(AttnRes, FastMatchesReferenceForwardAndBackward) {
  for (auto [n, N, d] : {std::tuple{1, 5, 8}, {2, 7, 33}, {4, 64, 130}, {3, 1, 1}}) {
    Case c(n, N, d, 7 + n);
    auto ptrs = c.ptrs();
    kernels::AttnResArgs a{ptrs.data(), n, N, d, c.nw.data(), c.pw.data(), 1e-5f};
    std::vector<float> out(static_cast<size_t>(N * d)), alpha(static_cast<size_t>(N * n));
    kernels::attn_res_forward(a, out.data(), alpha.data());

    std::vector<std::vector<double>> rows_d;
    std::vector<const double*> pd;
    for (auto& r : c.rows) rows_d.push_back(cast_vec<double>(r));
    for (auto& r : rows_d) pd.push_back(r.data());
    auto nw = cast_vec<double>(c.nw), pw = cast_vec<double>(c.pw), dout = cast_vec<double>(c.dout);
    std::vector<double> ref(static_cast<size_t>(N * d));
    ref::attn_res_forward<double>(pd.data(), n, N, d, nw.data(), pw.data(), 1e-5, ref.data());
    K3_EXPECT_CLOSE(out, ref, 1e-5, 1e-4);

    std::vector<std::vector<float>> drows(static_cast<size_t>(n), std::vector<float>(static_cast<size_t>(N * d)));
    std::vector<float*> dptr;
    for (auto& r : drows) dptr.push_back(r.data());
    std::vector<float> dnw(static_cast<size_t>(d)), dpw(static_cast<size_t>(d)), scratch(static_cast<size_t>(N * n));
    kernels::attn_res_backward(a, alpha.data(), c.dout.data(), dptr.data(), dnw.data(), dpw.data(), scratch.data());

    std::vector<std::vector<double>> rd(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(N * d)));
    std::vector<double*> rdp;
    for (auto& r : rd) rdp.push_back(r.data());
    std::vector<double> rnw(static_cast<size_t>(d)), rpw(static_cast<size_t>(d));
    ref::attn_res_backward<double>(pd.data(), n, N, d, nw.data(), pw.data(), 1e-5, dout.data(), rdp.data(),
                                   rnw.data(), rpw.data());
    for (int64_t i = 0; i < n; ++i) K3_EXPECT_CLOSE(drows[static_cast<size_t>(i)], rd[static_cast<size_t>(i)], 1e-5, 1e-3);
    K3_EXPECT_CLOSE(dnw, rnw, 1e-4, 1e-3);
    K3_EXPECT_CLOSE(dpw, rpw, 1e-4, 1e-3);
  }
}

// The reference backward against central finite differences of the reference forward, in double.
TEST(AttnRes, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t n = 3, N = 2, d = 5;
  Case c(n, N, d, 3);
  std::vector<double> x;  // all rows, then norm weight, then proj weight
  for (auto& r : c.rows) x.insert(x.end(), r.begin(), r.end());
  x.insert(x.end(), c.nw.begin(), c.nw.end());
  x.insert(x.end(), c.pw.begin(), c.pw.end());
  const auto probe = random_vec<double>(static_cast<size_t>(N * d), 9);
  auto split = [&](const std::vector<double>& v, std::vector<const double*>& rows, const double*& nw,
                   const double*& pw) {
    rows.clear();
    for (int64_t i = 0; i < n; ++i) rows.push_back(v.data() + i * N * d);
    nw = v.data() + n * N * d;
    pw = nw + d;
  };
  auto f = [&](const std::vector<double>& v) {
    std::vector<const double*> rows;
    const double *nw, *pw;
    split(v, rows, nw, pw);
    std::vector<double> out(static_cast<size_t>(N * d));
    ref::attn_res_forward<double>(rows.data(), n, N, d, nw, pw, 1e-5, out.data());
    return testing::dot(out, probe);
  };
  std::vector<double> numeric = testing::finite_difference(f, x);
  std::vector<double> analytic(x.size());
  std::vector<const double*> rows;
  const double *nw, *pw;
  split(x, rows, nw, pw);
  std::vector<double*> drows;
  for (int64_t i = 0; i < n; ++i) drows.push_back(analytic.data() + i * N * d);
  ref::attn_res_backward<double>(rows.data(), n, N, d, nw, pw, 1e-5, probe.data(), drows.data(),
                                 analytic.data() + n * N * d, analytic.data() + n * N * d + d);
  K3_EXPECT_CLOSE(analytic, numeric, 1e-7, 1e-6);
}

}  // namespace
}  // namespace k3
