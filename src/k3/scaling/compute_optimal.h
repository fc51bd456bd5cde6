// The compute-optimal split of a budget C = 6 N D under L(N, D) = E + A/N^alpha + B/D^beta:
// minimizing over N with D = C / (6 N) gives
//   N_opt = G (C/6)^(beta/(alpha+beta)),  D_opt = (C/6)^(alpha/(alpha+beta)) / G,
//   G = (alpha A / (beta B))^(1/(alpha+beta)).
#pragma once

#include "k3/scaling/scaling_law.h"

namespace k3::scaling {

struct ComputeOptimal {
  double compute = 0, params = 0, tokens = 0, loss = 0;
  double tokens_per_param() const { return tokens / params; }
};

// Form nd only, with alpha, beta, A, B > 0.
ComputeOptimal compute_optimal(const ScalingLaw& law, double compute);

}  // namespace k3::scaling
