// Small elementwise kernels the layers share: residual adds, sigmoid and the sigmoid output gate
// (y = x * sigmoid(g), used by gated MLA, KDA and the dense attention). These use libm's exp;
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

}  // namespace k3::kernels
