// Gated linear units, elementwise over n values: h = act(g) * up(u).
//   SiLU-GLU: h = silu(g) * u
//   SiTU-GLU: h = [b1 tanh(g/b1) sigmoid(g)] * [b2 tanh(u/b2)]  (math §5, b1 = 4, b2 = 25)
#pragma once

#include <cstdint>

namespace k3::kernels {

enum class GluKind { SiLU, SiTU };

struct GluParams {
  GluKind kind = GluKind::SiTU;
  float beta1 = 4.0f;   // activation_situ_beta
  float beta2 = 25.0f;  // activation_situ_linear_beta
};

void glu_forward(const GluParams& p, const float* g, const float* u, float* h, int64_t n);
void glu_backward(const GluParams& p, const float* g, const float* u, const float* dh, float* dg,
                  float* du, int64_t n);

}  // namespace k3::kernels
