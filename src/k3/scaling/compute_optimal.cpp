#include "k3/scaling/compute_optimal.h"

#include <cmath>

#include "k3/base/error.h"

namespace k3::scaling {

ComputeOptimal compute_optimal(const ScalingLaw& law, double compute) {
  K3_CHECK(law.form == LawForm::kParamsTokens,
           "the compute-optimal split needs the nd form (a term in N and one in D)");
  K3_CHECK(law.alpha > 0 && law.beta > 0 && law.A > 0 && law.B > 0 && compute > 0,
           "the compute-optimal split needs alpha, beta, A, B and C > 0 (alpha ", law.alpha,
           ", beta ", law.beta, ")");
  const double sum = law.alpha + law.beta;
  const double g = std::pow(law.alpha * law.A / (law.beta * law.B), 1 / sum);
  ComputeOptimal o;
  o.compute = compute;
  o.params = g * std::pow(compute / 6, law.beta / sum);
  o.tokens = std::pow(compute / 6, law.alpha / sum) / g;
  o.loss = law.loss(o.params, o.tokens);
  return o;
}

}  // namespace k3::scaling
