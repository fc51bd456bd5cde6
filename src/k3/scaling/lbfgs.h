// L-BFGS with a strong-Wolfe line search: minimizes a smooth function of a few variables whose
// gradient is known (the scaling-law fit runs it from thousands of starts).
#pragma once

#include <functional>
#include <span>
#include <vector>

namespace k3::scaling {

// f(x) and, into grad (same length as x), its gradient.
using Objective = std::function<double(std::span<const double> x, std::span<double> grad)>;

struct LbfgsOptions {
  int memory = 10;  // correction pairs kept
  int max_iterations = 1000;
  // Stop when (f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1) <= ftol (scipy L-BFGS-B's factr * eps),
  // or when max_i |grad_i| <= gtol.
  double ftol = 2.220446049250313e-09;
  double gtol = 1e-5;
  // Strong Wolfe: sufficient decrease c1, curvature c2.
  double c1 = 1e-4, c2 = 0.9;
  int max_line_search_evaluations = 40;
};

enum class LbfgsStop { kGradient, kRelativeDecrease, kMaxIterations, kLineSearch, kNonFinite };

struct LbfgsResult {
  std::vector<double> x;
  double f = 0;
  int iterations = 0, evaluations = 0;
  LbfgsStop stop = LbfgsStop::kMaxIterations;
};

LbfgsResult lbfgs_minimize(const Objective& f, std::vector<double> x0,
                           const LbfgsOptions& options = {});

const char* stop_name(LbfgsStop stop);

}  // namespace k3::scaling
