#include "k3/scaling/fit_plot.h"

#include <algorithm>
#include <cmath>

#include "k3/base/format.h"
#include "k3/base/svg_plot.h"
#include "k3/scaling/compute_optimal.h"

namespace k3::scaling {
namespace {

constexpr int kSamples = 120;

struct Span {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
  double at(int i, int n) const { return lo + (hi - lo) * i / (n - 1); }
};

// Data points drawn as dots: a gap (NaN) between any two.
PlotSeries dots(const std::string& name, const std::vector<double>& x,
                const std::vector<double>& y) {
  PlotSeries s{name, {}, {}};
  for (size_t i = 0; i < x.size(); ++i) {
    s.x.insert(s.x.end(), {x[i], NAN});
    s.y.insert(s.y.end(), {y[i], NAN});
  }
  return s;
}

// Iso-loss curves D(N) = (B / (L - E - A/N^alpha))^(1/beta) at a few losses across the data's
// range, the compute-optimal frontier, and the points; x is log10 N, y is D on a log axis.
LinePlot contour_plot(const ScalingLaw& law, const ScalingRuns& runs) {
  LinePlot p;
  p.title = "iso-loss contours of the fit";
  p.x_label = "log10 parameters N";
  p.y_label = "tokens D";
  p.log_y = true;
  Span log_n, log_d, loss;
  for (size_t i = 0; i < runs.loss.size(); ++i)
    log_n.add(std::log10(runs.params[i])), log_d.add(std::log10(runs.tokens[i])),
        loss.add(runs.loss[i]);
  log_n = {log_n.lo - 0.25, log_n.hi + 0.25};
  log_d = {log_d.lo - 0.25, log_d.hi + 0.25};
  auto inside = [&](double d) { return std::log10(d) >= log_d.lo && std::log10(d) <= log_d.hi; };
  constexpr int kLevels = 5;
  for (int level = 0; level < kLevels; ++level) {
    const double target = loss.at(level, kLevels);
    PlotSeries s{"L = " + strprintf("%.3g", target), {}, {}};
    for (int i = 0; i < kSamples; ++i) {
      const double x = log_n.at(i, kSamples),
                   rest = target - law.E - law.A / std::pow(10, law.alpha * x);
      const double d = rest > 0 ? std::pow(law.B / rest, 1 / law.beta) : NAN;
      s.x.push_back(x);
      s.y.push_back(std::isfinite(d) && inside(d) ? d : NAN);
    }
    p.series.push_back(std::move(s));
  }
  if (law.alpha > 0 && law.beta > 0) {
    PlotSeries frontier{"compute-optimal", {}, {}};
    // The frontier over the compute range of the plotted plane.
    const Span log_c{std::log10(6.0) + log_n.lo + log_d.lo, std::log10(6.0) + log_n.hi + log_d.hi};
    for (int i = 0; i < kSamples; ++i) {
      const ComputeOptimal o = compute_optimal(law, std::pow(10, log_c.at(i, kSamples)));
      const double x = std::log10(o.params);
      const bool shown = x >= log_n.lo && x <= log_n.hi && inside(o.tokens);
      frontier.x.push_back(x);
      frontier.y.push_back(shown ? o.tokens : NAN);
    }
    p.series.push_back(std::move(frontier));
  }
  std::vector<double> xs;
  for (double n : runs.params) xs.push_back(std::log10(n));
  p.series.push_back(dots("runs", xs, runs.tokens));
  return p;
}

// The loss of each run against log10 C, with the fit's loss at compute-optimal N, D (form nd) or
// its L(C) (form c).
LinePlot compute_plot(const ScalingLaw& law, const ScalingRuns& runs) {
  LinePlot p;
  p.title = "loss against compute C = 6 N D";
  p.x_label = "log10 C (FLOPs)";
  p.y_label = "loss";
  Span log_c;
  std::vector<double> xs;
  for (size_t i = 0; i < runs.loss.size(); ++i) {
    xs.push_back(std::log10(6 * runs.params[i] * runs.tokens[i]));
    log_c.add(xs.back());
  }
  PlotSeries fit{
      law.form == LawForm::kCompute ? "fit L(C)" : "fit at compute-optimal N, D", {}, {}};
  for (int i = 0; i < kSamples; ++i) {
    const double c = std::pow(10, log_c.at(i, kSamples));
    const bool frontier = law.form == LawForm::kParamsTokens && law.alpha > 0 && law.beta > 0;
    const double loss = law.form == LawForm::kCompute ? law.loss_at_compute(c)
                        : frontier                    ? compute_optimal(law, c).loss
                                                      : NAN;
    fit.x.push_back(log_c.at(i, kSamples));
    fit.y.push_back(loss);
  }
  p.series.push_back(std::move(fit));
  p.series.push_back(dots("runs", xs, runs.loss));
  return p;
}

// The panels one above the other in one SVG document.
std::string stack(const std::vector<LinePlot>& panels) {
  int height = 0, width = 0;
  std::string body;
  for (const LinePlot& p : panels) {
    std::string svg = render_line_plot(p);
    svg.replace(0, 4, strprintf("<svg y=\"%d\"", height));
    body += svg;
    height += p.height;
    width = std::max(width, p.width);
  }
  return strprintf("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\">\n", width,
                   height) +
         body + "</svg>\n";
}

}  // namespace

std::string render_fit_svg(const ScalingLaw& law, const ScalingRuns& runs,
                           const std::string& title) {
  std::vector<LinePlot> panels;
  if (law.form == LawForm::kParamsTokens) panels.push_back(contour_plot(law, runs));
  panels.push_back(compute_plot(law, runs));
  panels.front().title = title + ": " + panels.front().title;
  return stack(panels);
}

}  // namespace k3::scaling
