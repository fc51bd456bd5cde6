// Rotary position embeddings (kernels/rope.h): the convention (dimension i turns with i + d/2),
// Llama 3's scaled frequencies, the fast fp32 kernel against the plain reference in double, and
// both backward passes against central finite differences of the double forward.
#include "k3/kernels/rope.h"

#include <numbers>

#include "common/test_util.h"
#include "k3/kernels/reference.h"

namespace k3::rope_test {
namespace {

using kernels::RopeLayout;
using testing::cast_vec;
using testing::random_vec;

std::vector<int64_t> positions(int64_t rows, int64_t stride) {
  std::vector<int64_t> p(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) p[static_cast<size_t>(r)] = (r * stride) % 131072;
  return p;
}

// d = 4 at position 1, θ = 100: f = (1, 1/10); x = e_0 turns into the plane of e_0 and e_2 (HF's
// rotate_half), x = e_1 into that of e_1 and e_3 at a tenth of the angle.
TEST(Rope, PairsDimensionIWithIPlusHalf) {
  const std::vector<double> f = kernels::rope_frequencies(4, 100);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_DOUBLE_EQ(f[1], 0.1);
  const int64_t p = 1;
  std::vector<float> x = {1, 0, 0, 0, 0, 1, 0, 0};  // two rows at the same position
  const std::vector<int64_t> pos = {p, p};
  kernels::rope_forward({2, 1, 4, 4, 4}, f.data(), pos.data(), x.data());
  const std::vector<float> want = {std::cos(1.f), 0, std::sin(1.f), 0, 0,
                                   std::cos(.1f), 0, std::sin(.1f)};
  K3_EXPECT_CLOSE(x, want, 1e-7, 0);
}

// Llama 3.1's scaling (factor 8, low 1, high 4, original 8192) of θ = 500000, d = 128: wavelengths
// below 2048 positions keep their frequency, those above 8192 are divided by 8, and between them
// the frequency is interpolated by smooth = (8192 / wavelength − 1) / 3.
TEST(Rope, Llama3FrequenciesAreScaledByWavelength) {
  const std::vector<double> plain = kernels::rope_frequencies(128, 5e5);
  const std::vector<double> f = kernels::rope_frequencies(128, 5e5, {8, 1, 4, 8192});
  int kept = 0, divided = 0, between = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_DOUBLE_EQ(plain[i], std::pow(5e5, -2.0 * static_cast<double>(i) / 128));
    const double wavelength = 2 * std::numbers::pi / plain[i];
    if (wavelength < 2048) {
      EXPECT_EQ(f[i], plain[i]) << i;
      ++kept;
    } else if (wavelength > 8192) {
      EXPECT_DOUBLE_EQ(f[i], plain[i] / 8) << i;
      ++divided;
    } else {
      const double smooth = (8192 / wavelength - 1) / 3;
      EXPECT_NEAR(f[i], (1 - smooth) * plain[i] / 8 + smooth * plain[i], 1e-15) << i;
      ++between;
    }
  }
  // 2π θ^(2i/128) crosses 2048 at i ≈ 28.2 and 8192 at i ≈ 34.98.
  EXPECT_EQ(kept, 29);
  EXPECT_EQ(between, 6);
  EXPECT_EQ(divided, 29);
}

// The query-key product after rotation depends on the positions' difference only: the property
// attention relies on.
TEST(Rope, ScoresDependOnRelativePosition) {
  const int64_t d = 16;
  const std::vector<double> f = kernels::rope_frequencies(d, 1e4);
  const auto q = random_vec<double>(d, 1), k = random_vec<double>(d, 2);
  auto score = [&](int64_t pq, int64_t pk) {
    std::vector<double> a = q, b = k;
    ref::rope_forward<double>({1, 1, d, d, d}, f.data(), &pq, a.data());
    ref::rope_forward<double>({1, 1, d, d, d}, f.data(), &pk, b.data());
    return testing::dot(a, b);
  };
  EXPECT_NEAR(score(7, 3), score(1004, 1000), 1e-12);
  EXPECT_NEAR(score(0, 0), testing::dot(q, k), 1e-12);
  EXPECT_GT(std::abs(score(7, 3) - score(7, 4)), 1e-3);
}

// Layouts as the layers use them: whole heads (gated attention), the last d_r values of each head
// (MLA's queries) and one shared part (MLA's k_r).
const RopeLayout kLayouts[] = {{33, 4, 16, 64, 16},
                               {33, 3, 8, 72, 24},
                               {33, 1, 8, 8, 8},
                               {2049, 8, 64, 512, 64}};  // runs in parallel

TEST(Rope, FastMatchesReference) {
  for (const RopeLayout& l : kLayouts) {
    const std::vector<double> fl = kernels::rope_frequencies(l.d, 5e5, {8, 1, 4, 8192});
    const std::vector<int64_t> pos = positions(l.rows, 4099);
    const size_t n = static_cast<size_t>(l.rows * l.ld_row);
    auto x = random_vec(n, 3), dy = random_vec(n, 4);
    auto x_r = cast_vec<double>(x), dy_r = cast_vec<double>(dy);
    kernels::rope_forward(l, fl.data(), pos.data(), x.data());
    kernels::rope_backward(l, fl.data(), pos.data(), dy.data());
    ref::rope_forward<double>(l, fl.data(), pos.data(), x_r.data());
    ref::rope_backward<double>(l, fl.data(), pos.data(), dy_r.data());
    // Cosines and sines rounded to fp32 once, two products and a sum, of values below 1.
    K3_EXPECT_CLOSE(x, x_r, 1e-6, 1e-6);
    K3_EXPECT_CLOSE(dy, dy_r, 1e-6, 1e-6);
  }
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  const RopeLayout l = kLayouts[1];  // values outside the rotated parts stay as they are
  const std::vector<double> f = kernels::rope_frequencies(l.d, 1e4);
  const std::vector<int64_t> pos = positions(l.rows, 977);
  const size_t n = static_cast<size_t>(l.rows * l.ld_row);
  const auto x = random_vec<double>(n, 5), R = random_vec<double>(n, 6);  // loss = <rope(x), R>
  const auto fd = testing::finite_difference(
      [&](std::vector<double> xx) {
        ref::rope_forward<double>(l, f.data(), pos.data(), xx.data());
        return testing::dot(xx, R);
      },
      x);
  std::vector<double> dx = R;
  ref::rope_backward<double>(l, f.data(), pos.data(), dx.data());
  K3_EXPECT_CLOSE(dx, fd, 1e-8, 1e-6);
  std::vector<float> dx_f = cast_vec<float>(R);
  kernels::rope_backward(l, f.data(), pos.data(), dx_f.data());
  K3_EXPECT_CLOSE(dx_f, fd, 1e-6, 1e-5);
}

}  // namespace
}  // namespace k3::rope_test
