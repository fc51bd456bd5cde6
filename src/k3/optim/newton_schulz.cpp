#include "k3/optim/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "k3/base/error.h"
#include "k3/base/threads.h"
#include "k3/kernels/gemm.h"

namespace k3::optim {
namespace {

// A symmetric m×m product is computed as the tiles on and below the diagonal, kTile square, each
// a GEMM of its own (the rest is mirrored): 36 of 64 tiles for m = 4096. 512 keeps every tile's
// GEMM near peak on one core.
constexpr int64_t kTile = 512;
constexpr int64_t kMirrorTile = 32;  // transpose tile for mirroring
constexpr int kGramSegment = 3;      // Gram steps between forming A from X again

int64_t tiles_per_side(int64_t m) { return (m + kTile - 1) / kTile; }

// Share of an m×m product the lower tiles compute.
double lower_tile_fraction(int64_t m) {
  int64_t computed = 0;
  for (int64_t r0 = 0; r0 < m; r0 += kTile)
    computed += (std::min(m, r0 + kTile) - r0) * std::min(m, r0 + kTile);
  return static_cast<double>(computed) / static_cast<double>(m * m);
}

// Runs `count` independent GEMMs, task(k) being the k-th: one per thread (oneDNN then runs
// single-threaded in each) when they share evenly among the threads, else one after another with
// every thread on each. Each GEMM's result does not depend on which thread runs it.
template <typename Task>
void run_gemms(int64_t count, Task task) {
  const int threads = num_threads();
  if (count >= threads && (count % threads == 0 || count >= 4 * threads)) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < count; ++k) kernels::gemm(task(k));
  } else {
    for (int64_t k = 0; k < count; ++k) kernels::gemm(task(k));
  }
}

// C[r][c] = C[c][r] for c > r: exact symmetry, whatever the tiles computed above the diagonal.
// (Products of symmetric factors are then exact transposes of each other, which keeps rounding
// from building up through the steps.) Tiled so reads and writes stay within cache lines.
void mirror_lower(float* C, int64_t m, int64_t batch) {
  const int64_t tiles = (m + kMirrorTile - 1) / kMirrorTile;
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
  for (int64_t item = 0; item < batch; ++item)
    for (int64_t ti = 0; ti < tiles; ++ti) {
      float* c = C + item * m * m;
      const int64_t r0 = ti * kMirrorTile, r1 = std::min(m, r0 + kMirrorTile);
      for (int64_t c0 = r0; c0 < m; c0 += kMirrorTile)
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t col = std::max(c0, r + 1); col < std::min(m, c0 + kMirrorTile); ++col)
            c[r * m + col] = c[col * m + r];
    }
}

// Rows [r0, r0 + kTile) of L times rows [c0, c0 + kTile) of R, transposed, into that block of the
// m×m C (clipped at m): alpha·L·Rᵀ + beta·C there.
kernels::GemmArgs tile_product(const float* L, const float* R, int64_t k, float alpha, float beta,
                               float* C, int64_t m, int64_t r0, int64_t c0,
                               kernels::Precision precision) {
  return {.trans_b = true,
          .M = std::min(m, r0 + kTile) - r0,
          .N = std::min(m, c0 + kTile) - c0,
          .K = k,
          .alpha = alpha,
          .A = L + r0 * k,
          .lda = k,
          .B = R + c0 * k,
          .ldb = k,
          .beta = beta,
          .C = C + r0 * m + c0,
          .ldc = m,
          .precision = precision};
}

// C = alpha·L·Rᵀ + beta·C for `batch` m×m results that are symmetric by construction; L and R are
// [m, k] row-major, item i at offset i·stride.
void symmetric_product(const float* L, const float* R, int64_t k, int64_t stride, float alpha,
                       float beta, float* C, int64_t m, int64_t batch,
                       kernels::Precision precision) {
  const int64_t p = tiles_per_side(m), per_item = p * (p + 1) / 2;
  if (p == 1) {  // one tile: the whole product of every item, batched
    kernels::gemm_batched(tile_product(L, R, k, alpha, beta, C, m, 0, 0, precision), batch, stride,
                          stride, m * m);
    return mirror_lower(C, m, batch);
  }
  run_gemms(batch * per_item, [&](int64_t task) {
    const int64_t item = task / per_item, t = task % per_item;
    int64_t i = 0;  // tile row: t = i(i+1)/2 + j with j <= i
    while ((i + 1) * (i + 2) / 2 <= t) ++i;
    const int64_t j = t - i * (i + 1) / 2;
    return tile_product(L + item * stride, R + item * stride, k, alpha, beta, C + item * m * m, m,
                        i * kTile, j * kTile, precision);
  });
  mirror_lower(C, m, batch);
}

// out = S·X + beta·out for `batch` items: S [m, m], X and out [m, n].
void apply(const float* S, const float* X, float beta, float* out, int64_t batch, int64_t m,
           int64_t n, kernels::Precision precision) {
  kernels::gemm_batched({.M = m,
                         .N = n,
                         .K = m,
                         .A = S,
                         .lda = m,
                         .B = X,
                         .ldb = n,
                         .beta = beta,
                         .C = out,
                         .ldc = n,
                         .precision = precision},
                        batch, m * m, m * n, m * n);
}

void copy(float* dst, const float* src, int64_t count) {
  std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
}

}  // namespace

NewtonSchulz::NewtonSchulz(int steps, NewtonSchulzCoefficients coefficients,
                           kernels::Precision precision)
    : steps_(steps), coef_(coefficients), precision_(precision) {
  K3_CHECK(steps >= 1, "Newton-Schulz needs at least one step, got ", steps);
}

bool NewtonSchulz::uses_gram(int64_t m, int64_t n) const {
  // The Gram form's accuracy rests on fp32 rounding (the header); bf16 runs step by step, the
  // form Muon's authors run in bf16.
  if (precision_ == kernels::Precision::BF16) return false;
  // Multiply-adds in units of m²: an m×m·m×n product costs n, an m×m·m×m one m.
  const double s = lower_tile_fraction(m), dm = static_cast<double>(m), dn = static_cast<double>(n);
  const double direct = steps_ * (s * dn + s * dm + dn);
  double gram = 0;
  for (int k = 0; k < steps_; ++k) {
    const bool first = k % kGramSegment == 0,
               last = k % kGramSegment == kGramSegment - 1 || k == steps_ - 1;
    gram += s * dm * (1 + (first ? 0 : 1) + (last ? 0 : 2));  // A², P·Q, A·P·P
    if (first) gram += s * dn;                                // A = XXᵀ
    if (last) gram += dn;                                     // X ← Q·X
  }
  return gram < direct;
}

void NewtonSchulz::run(float* x, float* out, int64_t batch, int64_t m, int64_t n) {
  K3_CHECK(m >= 1 && m <= n && batch >= 1,
           "Newton-Schulz runs on a batch of wide matrices [m, n], m <= n; got ", batch, " x [", m,
           ", ", n, "]");
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
  if (uses_gram(m, n))
    run_gram(x, out, batch, m, n);
  else
    run_direct(x, out, batch, m, n);
}

void NewtonSchulz::run_direct(float* x, float* out, int64_t batch, int64_t m, int64_t n) {
  const int64_t mn = m * n, mm = m * m;
  float *A = work_.f32(), *B = A + batch * mm;
  float *cur = x, *next = out;
  for (int step = 0; step < steps_; ++step) {
    symmetric_product(cur, cur, n, mn, 1.0f, 0.0f, A, m, batch, precision_);  // A = XXᵀ
    copy(B, A, batch * mm);
    symmetric_product(A, A, m, mm, static_cast<float>(coef_.c), static_cast<float>(coef_.b), B, m,
                      batch, precision_);
    copy(next, cur, batch * mn);
    apply(B, cur, static_cast<float>(coef_.a), next, batch, m, n,
          precision_);  // X ← aX + (bA + cA²)X
    std::swap(cur, next);
  }
  if (cur != out) copy(out, cur, batch * mn);
}

void NewtonSchulz::run_gram(float* x, float* out, int64_t batch, int64_t m, int64_t n) {
  const int64_t mn = m * n, mm = m * m;
  float *A = work_.f32(), *P = A + batch * mm, *Q = P + batch * mm, *T = Q + batch * mm;
  const float a = static_cast<float>(coef_.a), b = static_cast<float>(coef_.b),
              c = static_cast<float>(coef_.c);
  float *cur = x, *next = out;
  for (int step = 0; step < steps_; ++step) {
    const bool first = step % kGramSegment == 0;
    const bool last = step % kGramSegment == kGramSegment - 1 || step == steps_ - 1;
    if (first) symmetric_product(cur, cur, n, mn, 1.0f, 0.0f, A, m, batch, precision_);  // A = XXᵀ
    // P = p(A) = aI + bA + cA²
    copy(P, A, batch * mm);
    symmetric_product(A, A, m, mm, c, b, P, m, batch, precision_);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t d = 0; d < m; ++d) P[i * mm + d * m + d] += a;
    if (first) {  // Q ← P·Q
      copy(Q, P, batch * mm);
    } else {
      symmetric_product(P, Q, m, mm, 1.0f, 0.0f, T, m, batch, precision_);
      std::swap(Q, T);
    }
    if (last) {  // X ← Q·X; the next segment forms A from it again
      apply(Q, cur, 0.0f, next, batch, m, n, precision_);
      std::swap(cur, next);
    } else {  // A ← A·P·P
      symmetric_product(A, P, m, mm, 1.0f, 0.0f, T, m, batch, precision_);
      symmetric_product(T, P, m, mm, 1.0f, 0.0f, A, m, batch, precision_);
    }
  }
  if (cur != out) copy(out, cur, batch * mn);
}

}  // namespace k3::optim
