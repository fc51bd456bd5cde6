// Fitting a scaling law: L-BFGS from every point of a start grid (both cores), the best minimum
// kept; terms held fixed; bootstrap intervals; outliers dropped by their residual.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "k3/scaling/lbfgs.h"
#include "k3/scaling/scaling_law.h"

namespace k3::scaling {

// The start values of each variable; the starts are every combination, enumerated with the
// last variable (beta) varying fastest.
struct StartGrid {
  std::array<std::vector<double>, kParamCount> values;
  static StartGrid chinchilla();  // a, b in {0, 5, ..., 25}, e in {-1, -0.5, ..., 1},
                                  // alpha, beta in {0, 0.5, ..., 2}: 4,500 starts
  // Replaces some axes: "alpha=0:2:0.5,e=-1:1:0.5" (first:last:step) or "a=5" (one value).
  void override_axes(const std::string& spec);
};

struct FitOptions {
  LawForm form = LawForm::kParamsTokens;
  double huber_delta = 1e-3;
  StartGrid grid = StartGrid::chinchilla();
  std::array<std::optional<double>, kParamCount> fixed;  // variables held at a value (log space)
  LbfgsOptions lbfgs;
  // The best start's minimum is refined once more under these (and so are bootstrap refits):
  // no relative-decrease stop, which on a near-L1 objective of size << 1 ends runs early.
  LbfgsOptions polish{.ftol = 0, .gtol = 1e-10};
};

// One start's outcome.
struct StartOutcome {
  int64_t start = 0;  // index into the grid's enumeration
  Theta theta{};
  double objective = INFINITY;
};

struct FitResult {
  Theta theta{};
  double objective = INFINITY;             // after the polish
  double best_start_objective = INFINITY;  // the best start's, before it
  int64_t starts = 0, best_start = -1;
  std::vector<StartOutcome> best_minima;  // the lowest few distinct minima, best first
  double seconds = 0;
  ScalingLaw law(LawForm form) const { return ScalingLaw::from_theta(form, theta); }
};

int64_t count_starts(const FitOptions& options);
Theta start_theta(const FitOptions& options, int64_t index);

// Every start on k3's threads; the best objective wins, ties going to the lower start index,
// so the result does not depend on the thread count; its minimum is then polished. Throws if no
// start reaches a finite value.
FitResult fit_scaling_law(const FitPoints& points, const FitOptions& options);

// One L-BFGS run from theta over the free variables (the fixed ones stay as they are).
StartOutcome minimize_from(const FitPoints& points, const FitOptions& options, const Theta& theta,
                           const LbfgsOptions& lbfgs);

// Bootstrap: RESAMPLES fits of points drawn with replacement (seeded, one stream per resample),
// each started from the full fit's best few minima. Returns each resample's theta. The command
// line takes at most kMaxResamples (a fit each; their thetas held together).
// With POINTS_OF, resample r draws from points_of(r), as many points as POINTS, instead (points
// moved by noise of their own in each resample: a sweep's seed noise); the draw is the same.
// It is called from several threads at once.
constexpr int kMaxResamples = 1000000;
std::vector<Theta> bootstrap_fits(const FitPoints& points, const FitOptions& options,
                                  const FitResult& full, int resamples, uint64_t seed,
                                  const std::function<FitPoints(int)>& points_of = {});

// The central 95% interval of each variable over bootstrap fits.
struct Interval {
  double lo = NAN, hi = NAN;
};
std::array<Interval, kParamCount> percentile_intervals(const std::vector<Theta>& fits,
                                                       double coverage = 0.95);

// Points whose log residual lies more than K robust standard deviations (1.4826 x the median
// absolute deviation) from the median residual; returns their indices, ascending.
std::vector<size_t> outlier_indices(const std::vector<double>& residuals, double k);

}  // namespace k3::scaling
