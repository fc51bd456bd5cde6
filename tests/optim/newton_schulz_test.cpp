#include "k3/optim/newton_schulz.h"

#include <random>

#include "common/test_util.h"
#include "k3/base/error.h"
#include "optim/linalg.h"

namespace k3::optim {
namespace {

using testing::Mat;

Mat gaussian(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist;
  Mat m(rows, cols);
  for (double& e : m.v) e = static_cast<float>(dist(rng));  // exactly representable in fp32
  return m;
}

// U diag(s) Vᵀ with the singular vectors of a Gaussian matrix and singular values spread
// log-uniformly over [smallest, 1]: an ill-conditioned input.
Mat with_spectrum(int64_t rows, int64_t cols, double smallest, uint64_t seed) {
  const testing::Svd g = testing::jacobi_svd(gaussian(rows, cols, seed));
  Mat m(rows, cols);
  for (int64_t k = 0; k < rows; ++k) {
    const double s = std::pow(smallest, static_cast<double>(k) / static_cast<double>(rows - 1));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) m(i, j) += g.u(i, k) * s * g.v(j, k);
  }
  for (double& e : m.v) e = static_cast<float>(e);
  return m;
}

// k3lab's Newton–Schulz on a batch of matrices of one shape, its products in `precision`, back as
// doubles.
std::vector<Mat> k3lab_ns(const std::vector<Mat>& in,
                          kernels::Precision precision = kernels::Precision::F32) {
  const int64_t m = in[0].rows, n = in[0].cols, size = m * n;
  std::vector<float> x(static_cast<size_t>(size) * in.size()), out(x.size());
  for (size_t b = 0; b < in.size(); ++b)
    std::copy(in[b].v.begin(), in[b].v.end(), x.begin() + static_cast<int64_t>(b) * size);
  NewtonSchulz(5, {}, precision).run(x.data(), out.data(), static_cast<int64_t>(in.size()), m, n);
  std::vector<Mat> result(in.size(), Mat(m, n));
  for (size_t b = 0; b < in.size(); ++b)
    std::copy(out.begin() + static_cast<int64_t>(b) * size,
              out.begin() + static_cast<int64_t>(b + 1) * size, result[b].v.begin());
  return result;
}

double max_abs_diff(const Mat& a, const Mat& b) {
  double worst = 0;
  for (size_t i = 0; i < a.v.size(); ++i) worst = std::max(worst, std::abs(a.v[i] - b.v[i]));
  return worst;
}

// k3lab evaluates the iteration step by step or through the Gram matrix (newton_schulz.h); in
// exact arithmetic both are math §7's form. Shapes cover both paths, one tile and several
// (m > 512: tiled symmetric products), and ill-conditioned inputs (singular values down to
// 1e-6). Entries are O(1/sqrt(n)); measured fp32 differences stay below 3e-6 (the step-by-step
// form in fp32 itself: below 3e-6 too).
TEST(NewtonSchulz, MatchesTheStepByStepFormInDouble) {
  struct Case {
    int64_t m, n, batch;
    double smallest_sigma;  // 0: Gaussian
    bool gram;
  };
  for (const Case& c :
       {Case{48, 48, 2, 0, false}, Case{40, 40, 1, 1e-6, false}, Case{520, 520, 1, 0, false},
        Case{32, 160, 3, 0, true}, Case{32, 128, 1, 1e-6, true}, Case{520, 1040, 1, 0, true}}) {
    EXPECT_EQ(NewtonSchulz(5).uses_gram(c.m, c.n), c.gram) << c.m << "x" << c.n;
    std::vector<Mat> in;
    for (int64_t b = 0; b < c.batch; ++b)
      in.push_back(c.smallest_sigma > 0 ? with_spectrum(c.m, c.n, c.smallest_sigma, 10 + b)
                                        : gaussian(c.m, c.n, 20 + b));
    const std::vector<Mat> ours = k3lab_ns(in);
    for (size_t b = 0; b < in.size(); ++b)
      EXPECT_LE(max_abs_diff(ours[b], testing::newton_schulz_reference(in[b])), 1e-5)
          << c.m << "x" << c.n << " item " << b;
  }
}

// The iteration keeps the singular vectors and maps each singular value σ of V/‖V‖_F through the
// quintic five times: Uᵀ X W = diag(f⁵(σ)), with V = U diag(σ) Wᵀ from an SVD in double. This
// holds for square matrices too, whose smallest singular values have not converged.
TEST(NewtonSchulz, KeepsSingularVectorsAndMapsSingularValues) {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{40, 120}, {48, 48}}) {
    const Mat v = gaussian(m, n, 7);
    const testing::Svd svd = testing::jacobi_svd(v);
    double fro = 0;
    for (double s : svd.s) fro += s * s;
    const Mat x = k3lab_ns({v})[0];
    // Uᵀ X W: U is [m, m], X [m, n], W [n, m].
    Mat ut(m, m);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) ut(i, j) = svd.u(j, i);
    const Mat d = testing::matmul(testing::matmul(ut, x), svd.v);
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        const double expected =
            i == j ? testing::quintic_map(svd.s[static_cast<size_t>(i)] / std::sqrt(fro)) : 0;
        worst = std::max(worst, std::abs(d(i, j) - expected));
      }
    EXPECT_LE(worst, 1e-5) << m << "x" << n;
  }
}

// The polar factor U Wᵀ has every singular value 1; the quintic trades that for speed. Its
// iterates settle in a band: f maps [0.6818, 1.1344] into itself, and after five steps every
// σ ≥ 0.01 (as a fraction of ‖V‖_F) is inside it (smaller σ reach up to 1.2024 for σ ≥ 0.002, and
// values far below stay below: f multiplies them by a ≈ 3.44 per step). A wide Gaussian block
// [m, n] has σ_min/‖V‖_F ≈ (1 − sqrt(m/n))/sqrt(m), well above 0.01 for the shapes here (and
// for K3's [128, 7168] head blocks). Measured over these matrices: [0.6818, 1.1344].
TEST(NewtonSchulz, SingularValuesLandInTheQuinticBand) {
  double lo = 1e9, hi = 0;
  uint64_t seed = 100;
  for (auto [m, n] :
       {std::pair<int64_t, int64_t>{16, 64}, {32, 128}, {64, 256}, {24, 1000}, {100, 300}}) {
    for (int rep = 0; rep < 3; ++rep) {
      const Mat x = k3lab_ns({gaussian(m, n, ++seed)})[0];
      for (double s : testing::jacobi_svd(x).s) {
        lo = std::min(lo, s);
        hi = std::max(hi, s);
      }
    }
  }
  RecordProperty("band", std::to_string(lo) + " .. " + std::to_string(hi));
  EXPECT_GE(lo, 0.6815);
  EXPECT_LE(hi, 1.1347);
}

// Muon's practice runs Newton–Schulz in bf16: its products round their operands to bf16 (8
// significant bits) and the quintic, which pushes singular values into its band rather than onto 1,
// carries those roundings through the steps. Against the fp32 iteration on the same inputs the
// result moves by 1.6-4.2% of its Frobenius norm (‖X_bf16 − X_fp32‖_F / ‖X_fp32‖_F measured over
// 6 Gaussian inputs of each shape, on 1 and 2 threads, AVX-512 and ONEDNN_MAX_CPU_ISA=AVX2; the
// narrowest blocks drift most), a small share of the fp32 iteration's own distance from the polar
// factor (its singular values span [0.68, 1.13]); the bf16 result's span [0.666, 1.148]. Shapes:
// batched single-tile products (m·m·n small), one by one, the Gram-eligible wide ones.
TEST(NewtonSchulz, InBf16StaysNearTheFp32Iteration) {
  uint64_t seed = 300;
  double worst = 0, lo = 1e9, hi = 0;
  for (auto [m, n, batch] : {std::tuple<int64_t, int64_t, int64_t>{16, 64, 5},
                             {32, 128, 4},
                             {64, 128, 2},
                             {24, 1000, 3},
                             {100, 300, 1},
                             {128, 384, 2}})
    for (int rep = 0; rep < 2; ++rep) {
      std::vector<Mat> in;
      for (int64_t b = 0; b < batch; ++b) in.push_back(gaussian(m, n, ++seed));
      const std::vector<Mat> ours = k3lab_ns(in, kernels::Precision::BF16), fp32 = k3lab_ns(in);
      for (size_t b = 0; b < in.size(); ++b) {
        double diff = 0, norm = 0;
        for (size_t i = 0; i < ours[b].v.size(); ++i) {
          diff += (ours[b].v[i] - fp32[b].v[i]) * (ours[b].v[i] - fp32[b].v[i]);
          norm += fp32[b].v[i] * fp32[b].v[i];
        }
        const double relative = std::sqrt(diff / norm);
        worst = std::max(worst, relative);
        EXPECT_LE(relative, 0.06) << m << "x" << n << " item " << b;
        for (double s : testing::jacobi_svd(ours[b]).s) {
          lo = std::min(lo, s);
          hi = std::max(hi, s);
        }
      }
    }
  RecordProperty("relative_difference", std::to_string(worst));
  RecordProperty("band", std::to_string(lo) + " .. " + std::to_string(hi));
  EXPECT_GE(lo, 0.64);
  EXPECT_LE(hi, 1.17);
}

TEST(NewtonSchulz, RejectsTallMatrices) {
  std::vector<float> x(12), out(12);
  EXPECT_THROW(NewtonSchulz(5).run(x.data(), out.data(), 1, 4, 3), Error);
}

}  // namespace
}  // namespace k3::optim
