#include "k3/scaling/lbfgs.h"

#include <algorithm>
#include <cmath>
#include <deque>

namespace k3::scaling {
namespace {

double dot(std::span<const double> a, std::span<const double> b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double max_abs(std::span<const double> v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// One evaluation along the search line x + step * direction.
struct LinePoint {
  double step = 0, f = 0, slope = 0;  // slope: directional derivative at step
};

// The minimizer of the cubic through two line points (value and slope at each), kept inside the
// middle 80% of [lo, hi] so that the bracket always shrinks; bisection where the cubic fails.
double cubic_step(const LinePoint& a, const LinePoint& b) {
  const double lo = std::min(a.step, b.step), hi = std::max(a.step, b.step);
  const double margin = 0.1 * (hi - lo), mid = 0.5 * (lo + hi);
  if (!std::isfinite(a.f) || !std::isfinite(b.f)) return mid;
  const double d1 = a.slope + b.slope - 3 * (a.f - b.f) / (a.step - b.step);
  const double radicand = d1 * d1 - a.slope * b.slope;
  if (!(radicand >= 0)) return mid;
  const double d2 = std::copysign(std::sqrt(radicand), b.step - a.step);
  const double t = b.step - (b.step - a.step) * (b.slope + d2 - d1) / (b.slope - a.slope + 2 * d2);
  if (!std::isfinite(t)) return mid;
  return std::clamp(t, lo + margin, hi - margin);
}

class LineSearch {
 public:
  LineSearch(const Objective& f, const LbfgsOptions& o, std::span<const double> x,
             std::span<const double> direction, double f0, double slope0, int& evaluations)
      : f_(f),
        o_(o),
        x_(x),
        p_(direction),
        f0_(f0),
        slope0_(slope0),
        evaluations_(evaluations),
        trial_(x.size()),
        grad_(x.size()) {}

  // Nocedal & Wright, Algorithms 3.5 and 3.6: bracket a step meeting the strong Wolfe conditions,
  // then zoom in on it. On success trial()/grad() hold the accepted point.
  bool search(double initial_step) {
    LinePoint previous{0, f0_, slope0_};
    double step = initial_step;
    for (int i = 0; i < o_.max_line_search_evaluations; ++i) {
      const LinePoint cur = evaluate(step);
      if (!sufficient_decrease(cur) || (i > 0 && cur.f >= previous.f)) return zoom(previous, cur);
      if (std::abs(cur.slope) <= -o_.c2 * slope0_) return true;
      if (cur.slope >= 0) return zoom(cur, previous);
      previous = cur;
      step *= 2;
    }
    return false;
  }
  std::vector<double>& trial() { return trial_; }
  std::vector<double>& grad() { return grad_; }
  double f() const { return f_trial_; }

 private:
  bool sufficient_decrease(const LinePoint& p) const {
    return std::isfinite(p.f) && p.f <= f0_ + o_.c1 * p.step * slope0_;
  }
  LinePoint evaluate(double step) {
    for (size_t i = 0; i < x_.size(); ++i) trial_[i] = x_[i] + step * p_[i];
    ++evaluations_;
    ++used_;
    f_trial_ = f_(trial_, grad_);
    const double slope = dot(grad_, p_);
    if (!std::isfinite(f_trial_) || !std::isfinite(slope)) return {step, INFINITY, NAN};
    return {step, f_trial_, slope};
  }
  // lo: the best step so far meeting sufficient decrease; hi: the other end of the bracket.
  bool zoom(LinePoint lo, LinePoint hi) {
    while (used_ < o_.max_line_search_evaluations) {
      const double step = cubic_step(lo, hi);
      if (step == lo.step || step == hi.step) break;  // the bracket is below double resolution
      const LinePoint cur = evaluate(step);
      if (!sufficient_decrease(cur) || cur.f >= lo.f) {
        hi = cur;
      } else {
        if (std::abs(cur.slope) <= -o_.c2 * slope0_) return true;
        if (cur.slope * (hi.step - lo.step) >= 0) hi = lo;
        lo = cur;
      }
    }
    // Out of evaluations: settle for the best decreasing step, if any.
    if (lo.step == 0) return false;
    evaluate(lo.step);
    return true;
  }

  const Objective& f_;
  const LbfgsOptions& o_;
  std::span<const double> x_, p_;
  double f0_, slope0_;
  int& evaluations_;
  int used_ = 0;
  std::vector<double> trial_, grad_;
  double f_trial_ = 0;
};

struct Correction {
  std::vector<double> s, y;
  double rho;  // 1 / (y . s)
};

// The two-loop recursion: direction = -H grad, H the L-BFGS inverse Hessian estimate.
void lbfgs_direction(const std::deque<Correction>& memory, std::span<const double> grad,
                     std::vector<double>& direction) {
  direction.assign(grad.begin(), grad.end());
  std::vector<double> alpha(memory.size());
  for (size_t k = memory.size(); k-- > 0;) {
    alpha[k] = memory[k].rho * dot(memory[k].s, direction);
    for (size_t i = 0; i < direction.size(); ++i) direction[i] -= alpha[k] * memory[k].y[i];
  }
  if (!memory.empty()) {
    const Correction& last = memory.back();
    const double gamma = 1 / (last.rho * dot(last.y, last.y));
    for (double& d : direction) d *= gamma;
  }
  for (size_t k = 0; k < memory.size(); ++k) {
    const double beta = memory[k].rho * dot(memory[k].y, direction);
    for (size_t i = 0; i < direction.size(); ++i)
      direction[i] += (alpha[k] - beta) * memory[k].s[i];
  }
  for (double& d : direction) d = -d;
}

}  // namespace

const char* stop_name(LbfgsStop stop) {
  switch (stop) {
    case LbfgsStop::kGradient:
      return "gradient below gtol";
    case LbfgsStop::kRelativeDecrease:
      return "relative decrease below ftol";
    case LbfgsStop::kMaxIterations:
      return "iteration limit";
    case LbfgsStop::kLineSearch:
      return "line search found no decrease";
    case LbfgsStop::kNonFinite:
      return "non-finite objective at the start";
  }
  return "?";
}

LbfgsResult lbfgs_minimize(const Objective& f, std::vector<double> x0, const LbfgsOptions& o) {
  LbfgsResult r;
  r.x = std::move(x0);
  const size_t n = r.x.size();
  std::vector<double> grad(n), direction(n);
  r.f = f(r.x, grad);
  r.evaluations = 1;
  if (!std::isfinite(r.f) || !std::isfinite(max_abs(grad))) {
    r.stop = LbfgsStop::kNonFinite;
    return r;
  }
  std::deque<Correction> memory;
  for (r.iterations = 0; r.iterations < o.max_iterations; ++r.iterations) {
    if (max_abs(grad) <= o.gtol) {
      r.stop = LbfgsStop::kGradient;
      return r;
    }
    lbfgs_direction(memory, grad, direction);
    double slope = dot(grad, direction);
    if (!(slope < 0)) {  // not a descent direction: forget the curvature pairs
      memory.clear();
      lbfgs_direction(memory, grad, direction);
      slope = dot(grad, direction);
    }
    // The first step (steepest descent) is scaled to a unit move; later ones try the full step.
    const double initial_step = memory.empty() ? std::min(1.0, 1 / max_abs(grad)) : 1.0;
    LineSearch search(f, o, r.x, direction, r.f, slope, r.evaluations);
    if (!search.search(initial_step)) {
      r.stop = LbfgsStop::kLineSearch;
      return r;
    }
    Correction c{std::vector<double>(n), std::vector<double>(n), 0};
    for (size_t i = 0; i < n; ++i)
      c.s[i] = search.trial()[i] - r.x[i], c.y[i] = search.grad()[i] - grad[i];
    const double ys = dot(c.y, c.s);
    const double previous_f = r.f;
    r.x.swap(search.trial());
    grad.swap(search.grad());
    r.f = search.f();
    if (ys > 1e-10 * dot(c.y, c.y)) {  // keep only pairs of positive curvature
      c.rho = 1 / ys;
      memory.push_back(std::move(c));
      if (static_cast<int>(memory.size()) > o.memory) memory.pop_front();
    }
    if ((previous_f - r.f) / std::max({std::abs(previous_f), std::abs(r.f), 1.0}) <= o.ftol) {
      ++r.iterations;
      r.stop = LbfgsStop::kRelativeDecrease;
      return r;
    }
  }
  r.stop = LbfgsStop::kMaxIterations;
  return r;
}

}  // namespace k3::scaling
