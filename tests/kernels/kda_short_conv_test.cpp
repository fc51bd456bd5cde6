#include "common/test_util.h"
#include "k3/kernels/kda/reference.h"
#include "k3/kernels/kda/short_conv.h"

namespace k3::kda_short_conv_test {
namespace {

using kernels::kda::ShortConvShape;
using testing::cast_vec;
using testing::random_vec;

int64_t window_size(const ShortConvShape& s, int64_t sequences) {
  return sequences * (s.K - 1) * s.C;
}

struct Case {
  int64_t B, T, C, K;
  std::vector<int64_t> doc_starts;
  ShortConvShape shape() const { return {B, T, C, K, doc_starts}; }
  int64_t sequences() const { return doc_starts.empty() ? B : int64_t(doc_starts.size()); }
};

// Several channel blocks, a ragged last block, K = 1, and documents shorter than the window.
const std::vector<Case> kCases = {
    {1, 1, 1, 4, {}},         {2, 9, 5, 4, {}},  {3, 20, 130, 4, {}},
    {1, 7, 3, 1, {}},         {2, 6, 70, 2, {}}, {1, 23, 33, 4, {0, 2, 3, 11}},
    {1, 40, 200, 4, {0, 17}},
};

TEST(KdaShortConv, ForwardMatchesReference) {
  for (const Case& c : kCases)
    for (bool with_window : {false, true}) {
      const ShortConvShape s = c.shape();
      const auto x = random_vec(s.B * s.T * s.C, 1), w = random_vec(s.C * s.K, 2),
                 win = random_vec(window_size(s, c.sequences()), 3);
      const float* wp = with_window ? win.data() : nullptr;
      std::vector<float> y(x.size()), wout(win.size());
      kernels::kda::short_conv_forward(s, x.data(), w.data(), wp, y.data(), wout.data());
      const auto wind = cast_vec<double>(win);
      std::vector<double> y_r(x.size()), wout_r(win.size());
      ref::kda::short_conv_forward<double>(
          s, cast_vec<double>(x).data(), cast_vec<double>(w).data(),
          with_window ? wind.data() : nullptr, y_r.data(), wout_r.data());
      K3_EXPECT_CLOSE(y, y_r, 1e-6, 1e-5);
      K3_EXPECT_CLOSE(wout, wout_r, 1e-30, 0);  // copies of inputs: exact
    }
}

// loss = <y, R> + <window_out, Rw>, gradients with respect to x, w and window_in.
TEST(KdaShortConv, BackwardMatchesFiniteDifferencesAndReference) {
  for (const Case& c : {Case{2, 5, 3, 4, {}}, Case{1, 9, 2, 3, {0, 1, 4}}, Case{1, 4, 2, 1, {}}}) {
    const ShortConvShape s = c.shape();
    const auto x = random_vec<double>(s.B * s.T * s.C, 1), w = random_vec<double>(s.C * s.K, 2),
               win = random_vec<double>(window_size(s, c.sequences()), 3),
               R = random_vec<double>(x.size(), 4), Rw = random_vec<double>(win.size(), 5);
    auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww,
                    const std::vector<double>& wi) {
      std::vector<double> y(xx.size()), wout(wi.size());
      ref::kda::short_conv_forward<double>(s, xx.data(), ww.data(), wi.data(), y.data(),
                                           wout.data());
      return testing::dot(y, R) + testing::dot(wout, Rw);
    };
    const auto fd_x = testing::finite_difference([&](const auto& v) { return loss(v, w, win); }, x);
    const auto fd_w = testing::finite_difference([&](const auto& v) { return loss(x, v, win); }, w);
    const auto fd_win =
        testing::finite_difference([&](const auto& v) { return loss(x, w, v); }, win);

    std::vector<double> dx(x.size()), dw(w.size(), 0.0), dwin(win.size());
    ref::kda::short_conv_backward<double>(s, x.data(), w.data(), win.data(), R.data(), Rw.data(),
                                          dx.data(), dw.data(), dwin.data());
    K3_EXPECT_CLOSE(dx, fd_x, 1e-8, 1e-6);
    K3_EXPECT_CLOSE(dw, fd_w, 1e-8, 1e-6);
    K3_EXPECT_CLOSE(dwin, fd_win, 1e-8, 1e-6);
  }
}

TEST(KdaShortConv, FastBackwardMatchesReference) {
  for (const Case& c : kCases)
    for (bool with_windows : {false, true}) {
      const ShortConvShape s = c.shape();
      const auto x = random_vec(s.B * s.T * s.C, 1), w = random_vec(s.C * s.K, 2),
                 win = random_vec(window_size(s, c.sequences()), 3), dy = random_vec(x.size(), 4),
                 dwout = random_vec(win.size(), 5), dw0 = random_vec(w.size(), 6);
      const float* winp = with_windows ? win.data() : nullptr;
      const float* dwoutp = with_windows ? dwout.data() : nullptr;
      std::vector<float> dx(x.size()), dw = dw0, dwin(win.size());
      kernels::kda::short_conv_backward(s, x.data(), w.data(), winp, dy.data(), dwoutp, dx.data(),
                                        dw.data(), dwin.data());
      const auto wind = cast_vec<double>(win), dwoutd = cast_vec<double>(dwout);
      std::vector<double> dx_r(x.size()), dw_r = cast_vec<double>(dw0), dwin_r(win.size());
      ref::kda::short_conv_backward<double>(
          s, cast_vec<double>(x).data(), cast_vec<double>(w).data(),
          with_windows ? wind.data() : nullptr, cast_vec<double>(dy).data(),
          with_windows ? dwoutd.data() : nullptr, dx_r.data(), dw_r.data(), dwin_r.data());
      K3_EXPECT_CLOSE(dx, dx_r, 1e-6, 1e-5);
      K3_EXPECT_CLOSE(dw, dw_r, 1e-5, 1e-5);
      K3_EXPECT_CLOSE(dwin, dwin_r, 1e-6, 1e-5);
    }
}

// Running [0, T1) and then [T1, T) from the returned window equals one run over [0, T); packed
// documents equal separate runs of each document.
TEST(KdaShortConv, ContinuationAndPackedDocuments) {
  const int64_t T = 30, C = 90, K = 4, T1 = 13;
  const auto x = random_vec(T * C, 1), w = random_vec(C * K, 2);
  std::vector<float> y(T * C), win((K - 1) * C);
  kernels::kda::short_conv_forward({1, T, C, K, {}}, x.data(), w.data(), nullptr, y.data(),
                                   win.data());
  std::vector<float> y2(T * C), mid((K - 1) * C), win2((K - 1) * C);
  kernels::kda::short_conv_forward({1, T1, C, K, {}}, x.data(), w.data(), nullptr, y2.data(),
                                   mid.data());
  kernels::kda::short_conv_forward({1, T - T1, C, K, {}}, x.data() + T1 * C, w.data(), mid.data(),
                                   y2.data() + T1 * C, win2.data());
  EXPECT_EQ(y, y2);
  EXPECT_EQ(win, win2);

  const std::vector<int64_t> starts = {0, 2, 13};
  std::vector<float> packed(T * C), packed_win(starts.size() * (K - 1) * C);
  kernels::kda::short_conv_forward({1, T, C, K, starts}, x.data(), w.data(), nullptr, packed.data(),
                                   packed_win.data());
  for (size_t d = 0; d < starts.size(); ++d) {
    const int64_t b = starts[d], len = (d + 1 < starts.size() ? starts[d + 1] : T) - b;
    std::vector<float> yd(len * C), wd((K - 1) * C);
    kernels::kda::short_conv_forward({1, len, C, K, {}}, x.data() + b * C, w.data(), nullptr,
                                     yd.data(), wd.data());
    EXPECT_EQ(yd, std::vector<float>(packed.begin() + b * C, packed.begin() + (b + len) * C));
    EXPECT_EQ(wd, std::vector<float>(packed_win.begin() + d * (K - 1) * C,
                                     packed_win.begin() + (d + 1) * (K - 1) * C));
  }
}

TEST(KdaShortConv, WeightGradientIsIndependentOfThreadCount) {
  const ShortConvShape s{4, 200, 256, 4, {}};
  const auto x = random_vec(s.B * s.T * s.C, 1), w = random_vec(s.C * s.K, 2),
             dy = random_vec(x.size(), 3);
  auto grads = [&](int threads) {
    testing::ScopedThreads scope(threads);
    std::vector<float> dx(x.size()), dw(w.size(), 0.0f);
    kernels::kda::short_conv_backward(s, x.data(), w.data(), nullptr, dy.data(), nullptr, dx.data(),
                                      dw.data(), nullptr);
    dw.insert(dw.end(), dx.begin(), dx.end());
    return dw;
  };
  EXPECT_EQ(grads(1), grads(2));
}

}  // namespace
}  // namespace k3::kda_short_conv_test
