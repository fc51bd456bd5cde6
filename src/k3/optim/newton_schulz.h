// Newton–Schulz orthogonalization, the core of Muon (math §7): X = V / (‖V‖_F + 1e-7), then
// five steps of X ← aX + (bA + cA²)X with A = XXᵀ and (a, b, c) = (3.4445, −4.7750, 2.0315).
// Each step maps every singular value σ of X to σ·p(σ²), p(λ) = a + bλ + cλ², and keeps the
// singular vectors, so X approaches the polar factor U Vᵀ of V — not exactly: the quintic trades
// accuracy for speed and leaves the singular values in a band around 1 (docs/optimizers.md).
//
// Two evaluation orders of the same iteration, chosen per shape by their cost:
//  * step by step, as written (square-ish matrices). A = XXᵀ and bA + cA² are symmetric, so only
//    their tiles on and below the diagonal are multiplied and the rest is mirrored: for large m
//    about 0.7 of the work.
//  * through the Gram matrix (wide matrices, n ≳ 1.3–1.8 m). Every Aₖ is a polynomial in
//    A₀ = X₀X₀ᵀ, so all of them commute and A_{k+1} = Aₖ p(Aₖ)², X_k = p(A_{k−1})···p(A₀) X₀ = Q_k
//    X₀: the steps run on m×m matrices and touch the m×n data only to form A₀ and apply Q. For a
//    head block [128, 7168] that is about 2/5 of the work. Forming A from X again every 3 steps (X
//    ← QX, A ← XXᵀ) keeps fp32 rounding as small as the step-by-step form's: without it, errors in
//    the smallest eigenvalues of A grow through the later steps (the tests measure both).
// Both agree with the step-by-step form in double to about 1e-6 (tests/optim/newton_schulz_test).
#pragma once

#include <cstdint>

#include "k3/kernels/gemm.h"
#include "k3/tensor/tensor.h"

namespace k3::optim {

struct NewtonSchulzCoefficients {
  double a = 3.4445, b = -4.7750, c = 2.0315;
};

// Reusable workspace (grown on demand): a training step allocates nothing once warm.
class NewtonSchulz {
 public:
  // precision: of every product (bf16 rounds their operands; norms and sums stay fp32).
  explicit NewtonSchulz(int steps = 5, NewtonSchulzCoefficients coefficients = {},
                        kernels::Precision precision = kernels::Precision::F32);

  // Orthogonalizes `batch` matrices [m, n] with m <= n (the wide orientation), stored one after
  // another: x holds V on entry and is overwritten (scratch); out receives the result. x and out
  // must not overlap.
  void run(float* x, float* out, int64_t batch, int64_t m, int64_t n);

  // Whether [m, n] runs through the Gram matrix (cheaper) rather than step by step (never in bf16).
  bool uses_gram(int64_t m, int64_t n) const;

  int64_t workspace_bytes() const { return static_cast<int64_t>(work_.nbytes()); }

 private:
  void run_direct(float* x, float* out, int64_t batch, int64_t m, int64_t n);
  void run_gram(float* x, float* out, int64_t batch, int64_t m, int64_t n);

  int steps_;
  NewtonSchulzCoefficients coef_;
  kernels::Precision precision_;
  Tensor work_;  // four m×m matrices per batch item
};

}  // namespace k3::optim
