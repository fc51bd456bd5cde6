#include "k3/optim/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "k3/base/error.h"
#include "k3/kernels/gemm.h"

namespace k3 {
namespace {

// Rows per strip of a symmetric product: strips of 256 rows keep each GEMM large enough to run
// near peak while skipping most of the work above the diagonal.
constexpr int64_t kStrip = 256;
constexpr int64_t kTile = 32;    // transpose tile for mirroring
constexpr int kGramSegment = 3;  // Gram steps between re-forming A from X

// Share of an m×m product the strips compute.
double strip_fraction(int64_t m) {
  int64_t computed = 0;
  for (int64_t r0 = 0; r0 < m; r0 += kStrip) computed += (std::min(m, r0 + kStrip) - r0) * std::min(m, r0 + kStrip);
  return static_cast<double>(computed) / static_cast<double>(m * m);
}

// C[r][c] = C[c][r] for c > r: exact symmetry, whatever the strips computed above the diagonal.
// (Products of symmetric factors are then exact transposes of each other, which keeps rounding
// from building up through the steps.) Tiled so reads and writes stay within cache lines.
void mirror_lower(float* C, int64_t m, int64_t batch) {
  const int64_t tiles = (m + kTile - 1) / kTile;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t item = 0; item < batch; ++item)
    for (int64_t ti = 0; ti < tiles; ++ti) {
      float* c = C + item * m * m;
      const int64_t r0 = ti * kTile, r1 = std::min(m, r0 + kTile);
      for (int64_t c0 = r0; c0 < m; c0 += kTile)
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t col = std::max(c0, r + 1); col < std::min(m, c0 + kTile); ++col) c[r * m + col] = c[col * m + r];
    }
}

// C = alpha·L·Rᵀ + beta·C for `batch` m×m results that are symmetric by construction; L and R are
// [m, k] row-major, item i at offset i·stride. Only the lower block strips are multiplied.
void symmetric_product(const float* L, const float* R, int64_t k, int64_t stride, float alpha,
                       float beta, float* C, int64_t m, int64_t batch) {
  for (int64_t r0 = 0; r0 < m; r0 += kStrip) {
    const int64_t r1 = std::min(m, r0 + kStrip);
    const kernels::GemmArgs g{false, true, r1 - r0, r1, k, alpha, L + r0 * k, k, R, k, beta, C + r0 * m, m};
    kernels::gemm_batched(g, batch, stride, stride, m * m);
  }
  mirror_lower(C, m, batch);
}

// out = S·X + beta·out for `batch` items: S [m, m], X and out [m, n].
void apply(const float* S, const float* X, float beta, float* out, int64_t batch, int64_t m, int64_t n) {
  const kernels::GemmArgs g{false, false, m, n, m, 1.0f, S, m, X, n, beta, out, n};
  kernels::gemm_batched(g, batch, m * m, m * n, m * n);
}

void copy(float* dst, const float* src, int64_t count) {
  std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
}

}  // namespace

NewtonSchulz::NewtonSchulz(int steps, NewtonSchulzCoefficients coefficients)
    : steps_(steps), coef_(coefficients) {
  K3_CHECK(steps >= 1, "Newton-Schulz needs at least one step, got ", steps);
}

bool NewtonSchulz::uses_gram(int64_t m, int64_t n) const {
  // Multiply-adds in units of m²: an m×m·m×n product costs n, an m×m·m×m one m.
  const double s = strip_fraction(m), dm = static_cast<double>(m), dn = static_cast<double>(n);
  const double direct = steps_ * (s * dn + s * dm + dn);
  double gram = 0;
  for (int k = 0; k < steps_; ++k) {
    const bool first = k % kGramSegment == 0, last = k % kGramSegment == kGramSegment - 1 || k == steps_ - 1;
    gram += s * dm * (1 + (first ? 0 : 1) + (last ? 0 : 2));  // A², P·Q, A·P·P
    if (first) gram += s * dn;                                 // A = XXᵀ
    if (last) gram += dn;                                      // X ← Q·X
  }
  return gram < direct;
}

void NewtonSchulz::run(float* x, float* out, int64_t batch, int64_t m, int64_t n) {
  K3_CHECK(m >= 1 && m <= n && batch >= 1,
           "Newton-Schulz runs on a batch of wide matrices [m, n], m <= n; got ", batch, " x [", m, ", ", n, "]");
  const int64_t mn = m * n;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < batch; ++i) {  // X₀ = V / (‖V‖_F + 1e-7)
    float* v = x + i * mn;
    double sum = 0;
    for (int64_t j = 0; j < mn; ++j) sum += static_cast<double>(v[j]) * v[j];
    const float scale = static_cast<float>(1.0 / (std::sqrt(sum) + 1e-7));
    for (int64_t j = 0; j < mn; ++j) v[j] *= scale;
  }
  if (work_.numel() < 4 * batch * m * m) work_ = Tensor::empty({4 * batch * m * m});
  if (uses_gram(m, n)) run_gram(x, out, batch, m, n);
  else run_direct(x, out, batch, m, n);
}

void NewtonSchulz::run_direct(float* x, float* out, int64_t batch, int64_t m, int64_t n) {
  const int64_t mn = m * n, mm = m * m;
  float *A = work_.f32(), *B = A + batch * mm;
  float *cur = x, *next = out;
  for (int step = 0; step < steps_; ++step) {
    symmetric_product(cur, cur, n, mn, 1.0f, 0.0f, A, m, batch);  // A = XXᵀ
    copy(B, A, batch * mm);
    symmetric_product(A, A, m, mm, static_cast<float>(coef_.c), static_cast<float>(coef_.b), B, m, batch);
    copy(next, cur, batch * mn);
    apply(B, cur, static_cast<float>(coef_.a), next, batch, m, n);  // X ← aX + (bA + cA²)X
    std::swap(cur, next);
  }
  if (cur != out) copy(out, cur, batch * mn);
}

void NewtonSchulz::run_gram(float* x, float* out, int64_t batch, int64_t m, int64_t n) {
  const int64_t mn = m * n, mm = m * m;
  float *A = work_.f32(), *P = A + batch * mm, *Q = P + batch * mm, *T = Q + batch * mm;
  const float a = static_cast<float>(coef_.a), b = static_cast<float>(coef_.b), c = static_cast<float>(coef_.c);
  float *cur = x, *next = out;
  for (int step = 0; step < steps_; ++step) {
    const bool first = step % kGramSegment == 0;
    const bool last = step % kGramSegment == kGramSegment - 1 || step == steps_ - 1;
    if (first) symmetric_product(cur, cur, n, mn, 1.0f, 0.0f, A, m, batch);  // A = XXᵀ
    // P = p(A) = aI + bA + cA²
    copy(P, A, batch * mm);
    symmetric_product(A, A, m, mm, c, b, P, m, batch);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t d = 0; d < m; ++d) P[i * mm + d * m + d] += a;
    if (first) {  // Q ← P·Q
      copy(Q, P, batch * mm);
    } else {
      symmetric_product(P, Q, m, mm, 1.0f, 0.0f, T, m, batch);
      std::swap(Q, T);
    }
    if (last) {  // X ← Q·X; the next segment forms A from it again
      apply(Q, cur, 0.0f, next, batch, m, n);
      std::swap(cur, next);
    } else {  // A ← A·P·P
      symmetric_product(A, P, m, mm, 1.0f, 0.0f, T, m, batch);
      symmetric_product(T, P, m, mm, 1.0f, 0.0f, A, m, batch);
    }
  }
  if (cur != out) copy(out, cur, batch * mn);
}

}  // namespace k3
