// Plain reference versions of every kernel, templated on the scalar type so tests can run them in
// double precision and check the fast fp32 kernels and the backward passes against finite
// differences. Written for clarity, not speed. Same layouts and semantics as the fast kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "k3/kernels/adamw.h"
#include "k3/kernels/attention.h"
#include "k3/kernels/glu.h"
#include "k3/kernels/rope.h"

namespace k3::ref {

// The logistic function; the references' one definition.
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// The bf16 product's reference (kernels::Precision::BF16): the elements of A and B that the
// product reads rounded to bf16, then multiplied and summed in double.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, double beta, double* C,
               int64_t ldc);

template <typename T>
void embedding_forward(const int32_t* tokens, int64_t n, const T* table, int64_t dim, T* out);
template <typename T>
void embedding_backward(const int32_t* tokens, int64_t n, const T* dout, int64_t dim, T* dtable);

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, int64_t rows, int64_t dim, T eps);
template <typename T>
void rmsnorm_backward(const T* x, const T* weight, const T* rstd, const T* dy, T* dx, T* dweight,
                      int64_t rows, int64_t dim);

template <typename T>
void glu_forward(const kernels::GluParams& p, const T* g, const T* u, T* h, int64_t n);
template <typename T>
void glu_backward(const kernels::GluParams& p, const T* g, const T* u, const T* dh, T* dg, T* du,
                  int64_t n);

// Naive causal attention: materializes every score (fine for tests).
template <typename T>
void attention_forward(const kernels::AttentionShape& s, const T* q, const T* k, const T* kr,
                       const T* v, T* out, T* lse);
template <typename T>
void attention_backward(const kernels::AttentionShape& s, const T* q, const T* k, const T* kr,
                        const T* v, const T* dout, T* dq, T* dk, T* dkr, T* dv);

// Rotary embeddings element by element (kernels/rope.h), in place; the backward is written as the
// forward's transposed Jacobian.
template <typename T>
void rope_forward(const kernels::RopeLayout& l, const double* freqs, const int64_t* positions,
                  T* x);
template <typename T>
void rope_backward(const kernels::RopeLayout& l, const double* freqs, const int64_t* positions,
                   T* dy);

// Logits materialized: loss sum over counted tokens, dh written, dw accumulated.
template <typename T>
double lm_head_cross_entropy(const T* h, const T* w, const int32_t* targets, int64_t N, int64_t d,
                             int64_t V, int32_t ignore_index, T grad_scale, T* dh, T* dw,
                             int64_t* count);

template <typename T>
void adamw_step(const kernels::AdamWParams& p, T* param, const T* grad, T* m, T* v, int64_t n);

template <typename T>
void sigmoid_gate_forward(const T* x, const T* g, T* y, int64_t n);
// GELU, written from its definition: x Φ(x) (or the tanh form), Φ' the normal density.
template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, bool tanh);
template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n, bool tanh);

template <typename T>
void sigmoid_gate_backward(const T* x, const T* g, const T* dy, T* dx, T* dg, int64_t n);

// Attention Residuals aggregation (kernels/attn_res.h): rows are n pointers to [N, d] arrays.
template <typename T>
void attn_res_forward(const T* const* rows, int64_t n, int64_t N, int64_t d, const T* norm_weight,
                      const T* proj_weight, T eps, T* out);
// Accumulates into d_rows, d_norm_weight, d_proj_weight.
template <typename T>
void attn_res_backward(const T* const* rows, int64_t n, int64_t N, int64_t d, const T* norm_weight,
                       const T* proj_weight, T eps, const T* dout, T* const* d_rows, T* d_norm_weight,
                       T* d_proj_weight);

}  // namespace k3::ref
