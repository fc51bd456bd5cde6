// Plain reference versions of the KDA kernels around the delta rule (gate, short convolution,
// head L2 norm, gated output norm), templated on the scalar type for double-precision tests.
// Same layouts and semantics as the fast kernels; the recurrent delta-rule reference lives in
// delta_rule.h.
#pragma once

#include <cstdint>

#include "k3/kernels/kda/gate.h"
#include "k3/kernels/kda/short_conv.h"

namespace k3::ref::kda {

template <typename T>
void gate_forward(const kernels::kda::GateParams& p, const T* f, const T* A_log, const T* dt_bias,
                  T* g);
template <typename T>
void gate_backward(const kernels::kda::GateParams& p, const T* f, const T* A_log, const T* dt_bias,
                   const T* dg, T* df, T* dA_log, T* ddt_bias);

template <typename T>
void short_conv_forward(const kernels::kda::ShortConvShape& s, const T* x, const T* w,
                        const T* window_in, T* y, T* window_out);
template <typename T>
void short_conv_backward(const kernels::kda::ShortConvShape& s, const T* x, const T* w,
                         const T* window_in, const T* dy, const T* dwindow_out, T* dx, T* dw,
                         T* dwindow_in);

template <typename T>
void l2norm_forward(const T* x, T* y, T* rnorm, int64_t rows, int64_t dim, T scale);
template <typename T>
void l2norm_backward(const T* y, const T* rnorm, const T* dy, T* dx, int64_t rows, int64_t dim,
                     T scale);

template <typename T>
void gated_rmsnorm_forward(const T* o, const T* w, const T* gate, T* y, T* rstd, int64_t rows,
                           int64_t dim, T eps);
template <typename T>
void gated_rmsnorm_backward(const T* o, const T* w, const T* gate, const T* rstd, const T* dy,
                            T* do_, T* dw, T* dgate, int64_t rows, int64_t dim);

}  // namespace k3::ref::kda
