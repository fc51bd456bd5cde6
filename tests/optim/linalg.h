// Double-precision references for the optimizer tests: a one-sided Jacobi SVD, Newton–Schulz in
// its step-by-step form, and the scalar map it applies to singular values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace k3::testing {

// Row-major [rows, cols] matrix of doubles.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c), 0.0) {}
  double& operator()(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double operator()(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

inline Mat matmul(const Mat& a, const Mat& b, bool transpose_b = false) {
  const int64_t n = transpose_b ? b.rows : b.cols;
  Mat c(a.rows, n);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k) {
      const double aik = a(i, k);
      for (int64_t j = 0; j < n; ++j) c(i, j) += aik * (transpose_b ? b(j, k) : b(k, j));
    }
  return c;
}

// X = U diag(s) Vᵀ for a wide X [m, n], m <= n: U [m, m], V [n, m] with orthonormal columns.
struct Svd {
  std::vector<double> s;
  Mat u, v;
};

// One-sided Jacobi (Hestenes) on the columns of B = Xᵀ: plane rotations B ← B·J, W ← W·J until
// every pair of columns is orthogonal; then the column norms of B are the singular values,
// B's normalized columns are X's right singular vectors and W holds its left ones.
inline Svd jacobi_svd(const Mat& x) {
  const int64_t m = x.rows, n = x.cols;
  Mat b(n, m), w(m, m);
  for (int64_t i = 0; i < m; ++i) {
    w(i, i) = 1;
    for (int64_t j = 0; j < n; ++j) b(j, i) = x(i, j);
  }
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (int64_t p = 0; p + 1 < m; ++p)
      for (int64_t q = p + 1; q < m; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (int64_t r = 0; r < n; ++r) {
          alpha += b(r, p) * b(r, p);
          beta += b(r, q) * b(r, q);
          gamma += b(r, p) * b(r, q);
        }
        if (std::abs(gamma) <= 1e-15 * std::sqrt(alpha * beta)) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (Mat* mat : {&b, &w})
          for (int64_t r = 0; r < mat->rows; ++r) {
            const double bp = (*mat)(r, p), bq = (*mat)(r, q);
            (*mat)(r, p) = c * bp - s * bq;
            (*mat)(r, q) = s * bp + c * bq;
          }
      }
    if (!rotated) break;
  }
  Svd out{std::vector<double>(static_cast<size_t>(m)), w, Mat(n, m)};
  for (int64_t j = 0; j < m; ++j) {
    double norm = 0;
    for (int64_t r = 0; r < n; ++r) norm += b(r, j) * b(r, j);
    norm = std::sqrt(norm);
    out.s[static_cast<size_t>(j)] = norm;
    for (int64_t r = 0; r < n; ++r) out.v(r, j) = norm > 0 ? b(r, j) / norm : 0;
  }
  return out;
}

constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;

// Newton–Schulz as math §7 writes it: X = V / (‖V‖_F + 1e-7), then X ← aX + (bA + cA²)X.
inline Mat newton_schulz_reference(Mat x, int steps = 5) {
  double norm = 0;
  for (double e : x.v) norm += e * e;
  for (double& e : x.v) e /= std::sqrt(norm) + 1e-7;
  for (int k = 0; k < steps; ++k) {
    const Mat a = matmul(x, x, true);
    Mat p = matmul(a, a);
    for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = kB * a.v[i] + kC * p.v[i];
    const Mat px = matmul(p, x);
    for (size_t i = 0; i < x.v.size(); ++i) x.v[i] = kA * x.v[i] + px.v[i];
  }
  return x;
}

// What the iteration does to one singular value σ of the normalized input.
inline double quintic_map(double sigma, int steps = 5) {
  for (int k = 0; k < steps; ++k)
    sigma = sigma * (kA + kB * sigma * sigma + kC * sigma * sigma * sigma * sigma);
  return sigma;
}

}  // namespace k3::testing
