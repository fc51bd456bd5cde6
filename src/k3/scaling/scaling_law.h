// The scaling law L(N, D) = E + A / N^alpha + B / D^beta (form nd), or L(C) = E + A / C^alpha
// (form c, C = 6 N D), and the robust objective its fit minimizes: the sum over points of
// Huber_delta(LSE(a - alpha log N, b - beta log D, e) - log L), with a = log A, b = log B,
// e = log E (the log-sum-exp form of Hoffmann et al. 2022).
#pragma once

#include <array>
#include <span>
#include <string>
#include <vector>

namespace k3::scaling {

enum class LawForm { kParamsTokens, kCompute };   // "nd", "c"
LawForm parse_law_form(const std::string& name);  // throws on anything but "nd" or "c"
const char* law_form_name(LawForm form);

// The fitted variables, in this order in every parameter vector.
enum Param { kLogA, kLogB, kLogE, kAlpha, kBeta, kParamCount };
using Theta = std::array<double, kParamCount>;
const char* param_name(int p);  // "a", "b", "e", "alpha", "beta"
// Which variables a form has: form c has no data term (b, beta).
bool form_uses(LawForm form, int p);

// The law in natural units.
struct ScalingLaw {
  LawForm form = LawForm::kParamsTokens;
  double E = 0, A = 0, B = 0, alpha = 0, beta = 0;  // B, beta unused by form c
  static ScalingLaw from_theta(LawForm form, const Theta& theta);
  double loss(double params, double tokens) const;  // form c: of C = 6 N D
  double loss_at_compute(double compute) const;     // form c only
};

// The points of a fit, as logs.
struct FitPoints {
  LawForm form = LawForm::kParamsTokens;
  std::vector<double> x1;  // log N (form nd) or log C (form c)
  std::vector<double> x2;  // log D (form nd), empty for form c
  std::vector<double> log_loss;
  size_t size() const { return log_loss.size(); }
};
FitPoints make_fit_points(LawForm form, std::span<const double> params,
                          std::span<const double> tokens, std::span<const double> loss);
// The points at INDICES (repeats allowed: a bootstrap resample).
FitPoints subset(const FitPoints& points, std::span<const size_t> indices);

double huber(double r, double delta);

// The objective at theta; with grad non-empty, its gradient (all kParamCount entries; the ones a
// form does not use are 0).
double fit_objective(const FitPoints& points, double huber_delta, const Theta& theta,
                     std::span<double> grad = {});

// Per point: the model's log loss minus the observed log loss.
std::vector<double> log_residuals(const FitPoints& points, const Theta& theta);

}  // namespace k3::scaling
