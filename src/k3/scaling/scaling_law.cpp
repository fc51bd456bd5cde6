#include "k3/scaling/scaling_law.h"

#include <algorithm>
#include <cmath>

#include "k3/base/error.h"

namespace k3::scaling {

LawForm parse_law_form(const std::string& name) {
  if (name == "nd") return LawForm::kParamsTokens;
  if (name == "c") return LawForm::kCompute;
  K3_CHECK(false, "unknown law form '", name, "': nd (E + A/N^alpha + B/D^beta) or c (E + A/C^alpha)");
  return LawForm::kParamsTokens;
}

const char* law_form_name(LawForm form) { return form == LawForm::kCompute ? "c" : "nd"; }

const char* param_name(int p) {
  static constexpr const char* kNames[] = {"a", "b", "e", "alpha", "beta"};
  return kNames[p];
}

bool form_uses(LawForm form, int p) {
  return form == LawForm::kParamsTokens || (p != kLogB && p != kBeta);
}

ScalingLaw ScalingLaw::from_theta(LawForm form, const Theta& t) {
  ScalingLaw law;
  law.form = form;
  law.E = std::exp(t[kLogE]);
  law.A = std::exp(t[kLogA]);
  law.alpha = t[kAlpha];
  if (form == LawForm::kParamsTokens) law.B = std::exp(t[kLogB]), law.beta = t[kBeta];
  return law;
}

double ScalingLaw::loss(double params, double tokens) const {
  if (form == LawForm::kCompute) return loss_at_compute(6 * params * tokens);
  return E + A / std::pow(params, alpha) + B / std::pow(tokens, beta);
}

double ScalingLaw::loss_at_compute(double compute) const {
  return E + A / std::pow(compute, alpha);
}

FitPoints make_fit_points(LawForm form, std::span<const double> params,
                          std::span<const double> tokens, std::span<const double> loss) {
  FitPoints p;
  p.form = form;
  for (size_t i = 0; i < loss.size(); ++i) {
    if (form == LawForm::kCompute) {
      p.x1.push_back(std::log(6 * params[i] * tokens[i]));
    } else {
      p.x1.push_back(std::log(params[i]));
      p.x2.push_back(std::log(tokens[i]));
    }
    p.log_loss.push_back(std::log(loss[i]));
  }
  return p;
}

FitPoints subset(const FitPoints& points, std::span<const size_t> indices) {
  FitPoints s;
  s.form = points.form;
  for (size_t i : indices) {
    s.x1.push_back(points.x1[i]);
    if (!points.x2.empty()) s.x2.push_back(points.x2[i]);
    s.log_loss.push_back(points.log_loss[i]);
  }
  return s;
}

double huber(double r, double delta) {
  const double m = std::abs(r);
  return m <= delta ? 0.5 * r * r : delta * (m - 0.5 * delta);
}

namespace {

// log(exp(t1) + exp(t2) + exp(t3)) and its softmax weights. The largest term is exp(0) = 1:
// two exponentials, not three (the objective's cost is its exponentials and logarithm).
struct Lse {
  double value, w1, w2, w3;
};
inline Lse lse_from_max(double m, double e1, double e2, double e3) {
  const double s = e1 + e2 + e3, inv = 1 / s;
  return {m + std::log(s), e1 * inv, e2 * inv, e3 * inv};
}
inline Lse lse3(double t1, double t2, double t3) {
  if (t1 >= t2 && t1 >= t3) return lse_from_max(t1, 1, std::exp(t2 - t1), std::exp(t3 - t1));
  if (t2 >= t3) return lse_from_max(t2, std::exp(t1 - t2), 1, std::exp(t3 - t2));
  return lse_from_max(t3, std::exp(t1 - t3), std::exp(t2 - t3), 1);
}
inline Lse lse2(double t1, double t3) {
  return t1 >= t3 ? lse_from_max(t1, 1, 0, std::exp(t3 - t1))
                  : lse_from_max(t3, std::exp(t1 - t3), 0, 1);
}

}  // namespace

double fit_objective(const FitPoints& pts, double delta, const Theta& t, std::span<double> grad) {
  const bool nd = pts.form == LawForm::kParamsTokens;
  double total = 0, ga = 0, gb = 0, ge = 0, galpha = 0, gbeta = 0;
  const size_t n = pts.size();
  for (size_t i = 0; i < n; ++i) {
    const double t1 = t[kLogA] - t[kAlpha] * pts.x1[i];
    const Lse l = nd ? lse3(t1, t[kLogB] - t[kBeta] * pts.x2[i], t[kLogE]) : lse2(t1, t[kLogE]);
    const double r = l.value - pts.log_loss[i];
    total += huber(r, delta);
    const double dr = std::clamp(r, -delta, delta);  // Huber's derivative
    ga += dr * l.w1;
    galpha -= dr * l.w1 * pts.x1[i];
    ge += dr * l.w3;
    if (nd) gb += dr * l.w2, gbeta -= dr * l.w2 * pts.x2[i];
  }
  if (!grad.empty()) {
    grad[kLogA] = ga, grad[kLogB] = gb, grad[kLogE] = ge, grad[kAlpha] = galpha;
    grad[kBeta] = gbeta;
  }
  return total;
}

std::vector<double> log_residuals(const FitPoints& pts, const Theta& t) {
  std::vector<double> r(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    const double t1 = t[kLogA] - t[kAlpha] * pts.x1[i];
    const Lse l = pts.form == LawForm::kParamsTokens
                      ? lse3(t1, t[kLogB] - t[kBeta] * pts.x2[i], t[kLogE])
                      : lse2(t1, t[kLogE]);
    r[i] = l.value - pts.log_loss[i];
  }
  return r;
}

}  // namespace k3::scaling
