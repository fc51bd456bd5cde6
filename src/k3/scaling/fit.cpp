#include "k3/scaling/fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "k3/base/error.h"
#include "k3/scaling/scaling_csv.h"

namespace k3::scaling {
namespace {

constexpr size_t kKeptMinima = 8;

std::vector<double> axis(double first, double last, double step) {
  std::vector<double> v;
  const auto n = static_cast<int64_t>(std::floor((last - first) / step + 1e-9));
  for (int64_t i = 0; i <= n; ++i) v.push_back(first + static_cast<double>(i) * step);
  return v;
}

double parse_number(const std::string& text, const std::string& spec) {
  size_t used = 0;
  double v = NAN;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  K3_CHECK(used == text.size() && std::isfinite(v), "--grid '", spec, "': '", text,
           "' is not a number");
  return v;
}

// The free variables of a fit: used by the form and not held fixed.
std::vector<int> free_params(const FitOptions& o) {
  std::vector<int> p;
  for (int i = 0; i < kParamCount; ++i)
    if (form_uses(o.form, i) && !o.fixed[i]) p.push_back(i);
  return p;
}

// The values a variable takes over the starts: its grid axis if free, else its one value.
std::vector<double> start_values(const FitOptions& o, int p) {
  if (o.fixed[p]) return {*o.fixed[p]};
  if (!form_uses(o.form, p)) return {0.0};
  return o.grid.values[p];
}

bool better(const StartOutcome& a, const StartOutcome& b) {
  return a.objective < b.objective || (a.objective == b.objective && a.start < b.start);
}

// Two minima are the same if every variable agrees to 1e-6 (relative to its size, at least 1).
bool same_minimum(const Theta& a, const Theta& b) {
  for (int p = 0; p < kParamCount; ++p)
    if (std::abs(a[p] - b[p]) > 1e-6 * std::max(1.0, std::abs(a[p]))) return false;
  return true;
}

}  // namespace

StartGrid StartGrid::chinchilla() {
  StartGrid g;
  g.values[kLogA] = axis(0, 25, 5);
  g.values[kLogB] = axis(0, 25, 5);
  g.values[kLogE] = axis(-1, 1, 0.5);
  g.values[kAlpha] = axis(0, 2, 0.5);
  g.values[kBeta] = axis(0, 2, 0.5);
  return g;
}

void StartGrid::override_axes(const std::string& spec) {
  for (const std::string& part : split_fields(spec, ',')) {
    const size_t eq = part.find('=');
    K3_CHECK(eq != std::string::npos, "--grid '", spec, "': '", part,
             "' is not NAME=FIRST:LAST:STEP or NAME=VALUE");
    const std::string name = part.substr(0, eq);
    int p = 0;
    while (p < kParamCount && name != param_name(p)) ++p;
    K3_CHECK(p < kParamCount, "--grid '", spec, "': unknown variable '", name,
             "' (a, b, e, alpha, beta)");
    const std::vector<std::string> range = split_fields(part.substr(eq + 1), ':');
    if (range.size() == 1) {
      values[p] = {parse_number(range[0], spec)};
      continue;
    }
    K3_CHECK(range.size() == 3, "--grid '", spec, "': '", part, "' is not NAME=FIRST:LAST:STEP");
    const double first = parse_number(range[0], spec), last = parse_number(range[1], spec),
                 step = parse_number(range[2], spec);
    K3_CHECK(step > 0 && last >= first && (last - first) / step < 1e4, "--grid '", spec, "': '",
             part, "' needs FIRST <= LAST and a STEP > 0 giving at most 10,000 values");
    values[p] = axis(first, last, step);
  }
}

int64_t count_starts(const FitOptions& o) {
  int64_t n = 1;
  for (int p = 0; p < kParamCount; ++p) n *= static_cast<int64_t>(start_values(o, p).size());
  return n;
}

Theta start_theta(const FitOptions& o, int64_t index) {
  Theta t{};
  for (int p = kParamCount - 1; p >= 0; --p) {
    const std::vector<double> v = start_values(o, p);
    const auto size = static_cast<int64_t>(v.size());
    t[p] = v[static_cast<size_t>(index % size)];
    index /= size;
  }
  return t;
}

StartOutcome minimize_from(const FitPoints& points, const FitOptions& o, const Theta& theta,
                           const LbfgsOptions& lbfgs) {
  const std::vector<int> free = free_params(o);
  Theta full = theta;
  std::array<double, kParamCount> grad{};
  auto objective = [&](std::span<const double> x, std::span<double> g) {
    for (size_t i = 0; i < free.size(); ++i) full[free[i]] = x[i];
    const double f = fit_objective(points, o.huber_delta, full, grad);
    for (size_t i = 0; i < free.size(); ++i) g[i] = grad[free[i]];
    return f;
  };
  std::vector<double> x0;
  for (int p : free) x0.push_back(theta[p]);
  const LbfgsResult r = lbfgs_minimize(objective, x0, lbfgs);
  StartOutcome out;
  out.theta = theta;
  for (size_t i = 0; i < free.size(); ++i) out.theta[free[i]] = r.x[i];
  out.objective = std::isfinite(r.f) ? r.f : INFINITY;
  return out;
}

FitResult fit_scaling_law(const FitPoints& points, const FitOptions& o) {
  const auto begin = std::chrono::steady_clock::now();
  FitResult result;
  result.starts = count_starts(o);
  std::vector<StartOutcome> outcomes(static_cast<size_t>(result.starts));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t s = 0; s < result.starts; ++s) {
    outcomes[static_cast<size_t>(s)] = minimize_from(points, o, start_theta(o, s), o.lbfgs);
    outcomes[static_cast<size_t>(s)].start = s;
  }
  std::sort(outcomes.begin(), outcomes.end(), better);
  K3_CHECK(!outcomes.empty() && std::isfinite(outcomes[0].objective),
           "no start of the fit reached a finite objective");
  for (const StartOutcome& s : outcomes) {
    if (!std::isfinite(s.objective) || result.best_minima.size() == kKeptMinima) break;
    bool seen = false;
    for (const StartOutcome& kept : result.best_minima)
      seen = seen || same_minimum(kept.theta, s.theta);
    if (!seen) result.best_minima.push_back(s);
  }
  const StartOutcome polished = minimize_from(points, o, outcomes[0].theta, o.polish);
  const bool improved = polished.objective < outcomes[0].objective;
  result.theta = improved ? polished.theta : outcomes[0].theta;
  result.objective = improved ? polished.objective : outcomes[0].objective;
  result.best_start_objective = outcomes[0].objective;
  result.best_start = outcomes[0].start;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return result;
}

std::vector<Theta> bootstrap_fits(const FitPoints& points, const FitOptions& o,
                                  const FitResult& full, int resamples, uint64_t seed,
                                  const std::function<FitPoints(int)>& points_of) {
  std::vector<Theta> fits(static_cast<size_t>(std::max(resamples, 0)));
#pragma omp parallel for schedule(dynamic, 1)
  for (int r = 0; r < resamples; ++r) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(r));
    std::vector<size_t> drawn(points.size());
    for (size_t& i : drawn) i = static_cast<size_t>(rng() % points.size());
    const FitPoints sample = subset(points_of ? points_of(r) : points, drawn);
    StartOutcome best;
    for (const StartOutcome& start : full.best_minima) {
      StartOutcome s = minimize_from(sample, o, start.theta, o.polish);
      s.start = start.start;
      if (better(s, best)) best = s;
    }
    fits[static_cast<size_t>(r)] = best.theta;
  }
  return fits;
}

std::array<Interval, kParamCount> percentile_intervals(const std::vector<Theta>& fits,
                                                       double coverage) {
  std::array<Interval, kParamCount> out;
  if (fits.empty()) return out;
  auto quantile = [](const std::vector<double>& sorted, double q) {
    const double pos = q * static_cast<double>(sorted.size() - 1);
    const auto i = static_cast<size_t>(std::floor(pos));
    const size_t j = std::min(i + 1, sorted.size() - 1);
    return sorted[i] + (pos - static_cast<double>(i)) * (sorted[j] - sorted[i]);
  };
  for (int p = 0; p < kParamCount; ++p) {
    std::vector<double> v;
    for (const Theta& t : fits) v.push_back(t[p]);
    std::sort(v.begin(), v.end());
    out[p] = {quantile(v, (1 - coverage) / 2), quantile(v, (1 + coverage) / 2)};
  }
  return out;
}

std::vector<size_t> outlier_indices(const std::vector<double>& residuals, double k) {
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  if (residuals.empty()) return {};
  const double centre = median(residuals);
  std::vector<double> deviation;
  for (double r : residuals) deviation.push_back(std::abs(r - centre));
  const double scale = 1.4826 * median(deviation);
  std::vector<size_t> out;
  for (size_t i = 0; i < residuals.size(); ++i)
    if (deviation[i] > k * scale) out.push_back(i);
  return out;
}

}  // namespace k3::scaling
