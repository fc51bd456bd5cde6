// Small elementwise kernels the layers share: residual adds, sigmoid and the sigmoid output gate
// (y = x * sigmoid(g), used by gated MLA, KDA and the dense attention), and GELU (the vision
// tower's MLP and projector). These use libm's exp;
// fast_math.h has the polynomial sigmoid that vectorizing kernel loops use instead.
#pragma once

#include <cstdint>

namespace k3::kernels {

void add(const float* a, const float* b, float* out, int64_t n);  // out may alias a or b
void add_inplace(float* acc, const float* x, int64_t n);            // acc += x

void sigmoid(const float* x, float* y, int64_t n);  // y may alias x

void sigmoid_gate_forward(const float* x, const float* g, float* y, int64_t n);
void sigmoid_gate_backward(const float* x, const float* g, const float* dy, float* dx, float* dg,
                           int64_t n);

// GELU: y = x Φ(x) with Φ the normal CDF (exact, through erf), or with `tanh` its tanh
// approximation 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))). y may alias x.
void gelu_forward(const float* x, float* y, int64_t n, bool tanh);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool tanh);

}  // namespace k3::kernels
