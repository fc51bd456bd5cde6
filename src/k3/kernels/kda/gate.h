// The KDA decay gate (math §3, step 4): per-channel log-decay g ≤ 0 from the low-rank gate
// projection f, per head h and channel c of the head:
//   bounded:   g = lb · sigmoid(exp(A_log[h]) · (f + dt_bias))        ∈ (lb, 0)
//   unbounded: g = −exp(A_log[h]) · softplus(f + dt_bias)              (the Kimi-Linear form)
// Layouts: f, g [rows, H, D]; A_log [H]; dt_bias [H·D].
#pragma once

#include <cstdint>

namespace k3::kernels::kda {

struct GateParams {
  int64_t rows = 1, H = 1, D = 1;
  bool bounded = true;
  float lower_bound = -5.0f;  // lb, used when bounded
};

void gate_forward(const GateParams& p, const float* f, const float* A_log, const float* dt_bias,
                  float* g);
// df is written; dA_log and ddt_bias are accumulated, reduced in an order that does not depend on
// the thread count.
void gate_backward(const GateParams& p, const float* f, const float* A_log, const float* dt_bias,
                   const float* dg, float* df, float* dA_log, float* ddt_bias);

}  // namespace k3::kernels::kda
