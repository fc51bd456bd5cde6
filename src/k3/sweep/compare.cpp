#include "k3/sweep/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/svg_plot.h"
#include "k3/scaling/compute_optimal.h"

namespace k3::sweep {
namespace {

using scaling::LawForm;

// One (lr, batch size) point of an arm at one size and budget: its finished seeds' losses.
struct GridPoint {
  const Job* job = nullptr;  // one of its jobs (N and D do not depend on the seed)
  std::vector<double> losses;
  double mean() const {
    double m = 0;
    for (double l : losses) m += l / static_cast<double>(losses.size());
    return m;
  }
};

// An arm's finished points at one (size, budget).
struct SizeRuns {
  double target = 0, budget = 0;
  std::vector<GridPoint> points;  // by lr, then batch size
};

struct ArmRuns {
  std::string arm;
  std::vector<SizeRuns> sizes;  // in the order of their optima's compute
  std::set<double> lrs_tried;
};

// The best point of SIZE by LOSSES (one per point), the first of equals.
Optimum best_of(const SizeRuns& size, const std::vector<double>& losses,
                const std::set<double>& lrs_tried) {
  const size_t best =
      static_cast<size_t>(std::min_element(losses.begin(), losses.end()) - losses.begin());
  const Job& j = *size.points[best].job;
  Optimum o;
  o.target = size.target;
  o.budget = size.budget;
  o.lr = j.lr;
  o.batch_size = j.batch_size;
  o.params = static_cast<double>(j.shape.params);
  // D of the best batch size's job (D depends on the batch only through rounding).
  o.tokens = static_cast<double>(j.tokens);
  o.compute = 6.0 * o.params * o.tokens;
  o.loss = losses[best];
  o.lr_at_edge =
      lrs_tried.size() > 1 && (o.lr == *lrs_tried.begin() || o.lr == *lrs_tried.rbegin());
  o.tried = static_cast<int64_t>(size.points.size());
  return o;
}

// The arm's optima, one per size. With NOISE, every point's seed mean is first moved by
// Gaussian noise of sd SD / sqrt(its seeds), so the noise also moves which lr wins.
std::vector<Optimum> optima_of(const ArmRuns& a, double sd = 0, std::mt19937_64* noise = nullptr) {
  std::normal_distribution<double> gaussian;
  std::vector<Optimum> out;
  for (const SizeRuns& size : a.sizes) {
    std::vector<double> losses;
    for (const GridPoint& p : size.points) {
      const double seeds = static_cast<double>(p.losses.size());
      losses.push_back(p.mean() + (noise ? sd / std::sqrt(seeds) * gaussian(*noise) : 0.0));
    }
    out.push_back(best_of(size, losses, a.lrs_tried));
  }
  return out;
}

// Each arm's finished runs, in the order the arms were planned.
std::vector<ArmRuns> group_runs(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                                const std::string& column) {
  std::vector<ArmRuns> arms;
  // arm -> (target, budget) -> (lr, batch) -> its point
  std::map<std::string,
           std::map<std::pair<double, double>, std::map<std::pair<double, int64_t>, GridPoint>>>
      points;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    auto arm =
        std::find_if(arms.begin(), arms.end(), [&](const ArmRuns& a) { return a.arm == j.arm; });
    if (arm == arms.end()) arm = arms.insert(arms.end(), ArmRuns{j.arm, {}, {}});
    arm->lrs_tried.insert(j.lr);
    const double loss = loss_of(results[i], column);
    if (results[i].status != "done" || !std::isfinite(loss)) continue;
    GridPoint& p = points[j.arm][{j.target, j.budget}][{j.lr, j.batch_size}];
    p.losses.push_back(loss);
    p.job = &j;
  }
  for (ArmRuns& a : arms) {
    for (const auto& [key, grid] : points[a.arm]) {
      SizeRuns size{key.first, key.second, {}};
      for (const auto& [lr_batch, p] : grid) size.points.push_back(p);
      a.sizes.push_back(std::move(size));
    }
    // Sorted as the optima are listed (and drawn by the bootstrap): by their compute.
    const std::vector<Optimum> optima = optima_of(a);
    std::vector<size_t> order(a.sizes.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return optima[x].compute < optima[y].compute; });
    std::vector<SizeRuns> sorted;
    for (size_t k : order) sorted.push_back(std::move(a.sizes[k]));
    a.sizes = std::move(sorted);
  }
  return arms;
}

// The points of SIZE that compete for its pick: its best point by seed mean, and the next lr on
// either side of it at the same batch size. A rate far from the optimum may diverge, and its
// seeds then differ by many times what they do where the pick is decided; pooling it would widen
// every interval by noise that never moves a pick.
std::vector<const GridPoint*> competing(const SizeRuns& size) {
  const auto best = std::min_element(
      size.points.begin(), size.points.end(),
      [](const GridPoint& x, const GridPoint& y) { return x.mean() < y.mean(); });
  if (best == size.points.end()) return {};
  std::vector<const GridPoint*> same_batch;  // in lr order, as the points are
  for (const GridPoint& p : size.points)
    if (p.job->batch_size == best->job->batch_size) same_batch.push_back(&p);
  const auto at = std::find(same_batch.begin(), same_batch.end(), &*best) - same_batch.begin();
  const auto from = std::max<ptrdiff_t>(at - 1, 0);
  const auto to = std::min<ptrdiff_t>(at + 2, std::ssize(same_batch));
  return {same_batch.begin() + from, same_batch.begin() + to};
}

// Pooled: a point of two or three seeds has one or two degrees of freedom, too few for an sd of
// its own, and the spread between seeds is taken to be a property of the training rather than
// of one point, so the squared deviations from each point's mean are summed over the competing
// points of every size and divided by all their degrees of freedom (n - 1 each).
SeedSpread spread_of(const std::vector<ArmRuns>& arms) {
  SeedSpread s;
  double squares = 0;
  int64_t degrees = 0;
  for (const ArmRuns& a : arms)
    for (const SizeRuns& size : a.sizes)
      for (const GridPoint* point : competing(size)) {
        const GridPoint& p = *point;
        const auto n = static_cast<int64_t>(p.losses.size());
        if (n < 2) continue;
        const double mean = p.mean();
        for (double l : p.losses) squares += (l - mean) * (l - mean);
        degrees += n - 1;
        s.min_seeds = s.points == 0 ? n : std::min(s.min_seeds, n);
        s.max_seeds = std::max(s.max_seeds, n);
        ++s.points;
      }
  if (degrees > 0) s.sd = std::sqrt(squares / static_cast<double>(degrees));
  return s;
}

scaling::FitPoints fit_points(LawForm form, const std::vector<Optimum>& optima) {
  std::vector<double> n, d, l;
  for (const Optimum& o : optima) {
    n.push_back(o.params);
    d.push_back(o.tokens);
    l.push_back(o.loss);
  }
  return scaling::make_fit_points(form, n, d, l);
}

// The seed noise of one arm in one resample: a stream of its own, apart from the resample's draw
// of the optima (which all arms share), since the arms' runs are different runs; the same on
// any thread.
std::mt19937_64 noise_stream(uint64_t seed, size_t arm, int resample) {
  std::seed_seq s{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                  static_cast<uint32_t>(arm), static_cast<uint32_t>(resample)};
  return std::mt19937_64(s);
}

// Arm INDEX's optima, and its law with bootstrap intervals when it has enough of them.
ArmFit fit_arm(const ArmRuns& runs, size_t index, bool budget_is_flops, const std::string& column,
               double seed_sd, int resamples, uint64_t seed) {
  ArmFit a;
  a.arm = runs.arm;
  a.optima = optima_of(runs);
  // One tokens-per-parameter budget moves N and D together: only L(C) can be fitted.
  std::set<double> budgets;
  for (const Optimum& o : a.optima) budgets.insert(o.budget);
  a.form = budget_is_flops || budgets.size() > 1 ? LawForm::kParamsTokens : LawForm::kCompute;
  for (int r = 0; r < resamples; ++r) {
    std::mt19937_64 noise = noise_stream(seed, index, r);
    a.resampled_optima.push_back(optima_of(runs, seed_sd, &noise));
  }
  const size_t needed = static_cast<size_t>(free_variables(a.form)) + 1;
  if (a.optima.size() < needed) {
    K3_CHECK(index > 0, "arm ", a.arm,
             ", the first (the others are compared through its law): ", a.optima.size(),
             " sizes have finished runs with a finite ", column, "; the fit of L",
             a.form == LawForm::kCompute ? "(C)" : "(N, D)", " needs at least ", needed);
    a.pointwise = true;
    return a;
  }
  scaling::FitOptions options;
  options.form = a.form;
  const scaling::FitPoints points = fit_points(a.form, a.optima);
  a.fit = scaling::fit_scaling_law(points, options);
  a.law = a.fit.law(a.form);
  if (resamples > 0) {
    const auto thetas =
        scaling::bootstrap_fits(points, options, a.fit, resamples, seed,
                                [&](int r) { return fit_points(a.form, a.resampled_optima[r]); });
    a.intervals = scaling::percentile_intervals(thetas);
    for (const auto& t : thetas) a.resampled.push_back(scaling::ScalingLaw::from_theta(a.form, t));
  }
  return a;
}

// The central 95% of per-resample VALUES.
scaling::Interval central_interval(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    return values[std::min(values.size() - 1, static_cast<size_t>(q * values.size()))];
  };
  return {at(0.025), at(0.975)};
}

// Arm B against arm A at LOSS. Per bootstrap resample, an arm that never reaches the loss needs
// infinite compute (the ratio is then infinite or 0); a resample where neither does says nothing.
Multiplier multiplier(const ArmFit& a, const ArmFit& b, double loss) {
  Multiplier m;
  m.arm = b.arm;
  m.value = compute_for_loss(b.law, loss) / compute_for_loss(a.law, loss);
  std::vector<double> values;
  for (size_t r = 0; r < b.resampled.size() && r < a.resampled.size(); ++r) {
    const double cb = compute_for_loss(b.resampled[r], loss);
    const double ca = compute_for_loss(a.resampled[r], loss);
    m.unreachable += !std::isfinite(cb) || !std::isfinite(ca);
    if (std::isfinite(cb) || std::isfinite(ca)) values.push_back(cb / ca);
  }
  m.interval = central_interval(std::move(values));
  return m;
}

// C / C_first(L) at optimum O by the first arm's LAW: 0 where the law never gets down to L.
double effective_ratio(const scaling::ScalingLaw& law, const Optimum& o) {
  return o.compute / compute_for_loss(law, o.loss);
}

// Arm A's ratio at its optimum I by the first arm's law, and its interval over the resamples
// (each resample's ratio multiplied into PRODUCTS).
Multiplier ratio_at(const ArmFit& first, const ArmFit& a, size_t i, std::vector<double>& products) {
  Multiplier m{a.arm, effective_ratio(first.law, a.optima[i]), {}, 0};
  std::vector<double> values;
  for (size_t r = 0; r < first.resampled.size(); ++r) {
    values.push_back(effective_ratio(first.resampled[r], a.resampled_optima[r][i]));
    m.unreachable += values.back() == 0;
    products[r] *= values.back();
  }
  m.interval = central_interval(std::move(values));
  return m;
}

// The point-wise arms' ratios at every size and budget where one of them has an optimum.
std::vector<PointwiseRow> pointwise_rows(const std::vector<ArmFit>& arms) {
  const ArmFit& first = arms.front();
  std::vector<const ArmFit*> pointwise;
  std::set<std::pair<double, double>> sizes;
  for (const ArmFit& a : arms)
    if (a.pointwise) {
      pointwise.push_back(&a);
      for (const Optimum& o : a.optima) sizes.insert({o.target, o.budget});
    }
  std::vector<PointwiseRow> rows;
  for (const auto& [target, budget] : sizes) {
    PointwiseRow row{target, budget, {}, {}, {}};
    Multiplier product{"product", 1.0, {}, 0};
    std::vector<double> products(first.resampled.size(), 1.0);
    for (const ArmFit* a : pointwise) {
      const auto at = std::find_if(a->optima.begin(), a->optima.end(), [&](const Optimum& o) {
        return o.target == target && o.budget == budget;
      });
      if (at == a->optima.end()) {
        row.optima.push_back({.target = target, .budget = budget, .loss = NAN});
        row.ratios.push_back({a->arm, NAN, {}, 0});
      } else {
        row.optima.push_back(*at);
        row.ratios.push_back(
            ratio_at(first, *a, static_cast<size_t>(at - a->optima.begin()), products));
      }
      product.value *= row.ratios.back().value;
    }
    if (pointwise.size() > 1 && !std::isnan(product.value)) {
      product.unreachable = std::count(products.begin(), products.end(), 0.0);
      product.interval = central_interval(std::move(products));
      row.product = product;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

double loss_of(const JobResult& r, const std::string& column) {
  if (column == "val_loss") return r.val_loss;
  if (column == "val_loss_smoothed") return r.val_loss_smoothed;
  if (column.starts_with("ood_")) {
    const auto it = r.ood.find(column);
    return it == r.ood.end() ? NAN : it->second;
  }
  throw Error("unknown loss column " + column +
                  " (val_loss, val_loss_smoothed or ood_ and a val_data text's name)",
              {"", "--loss", -1});
}

int free_variables(scaling::LawForm form) {
  int n = 0;
  for (int p = 0; p < scaling::kParamCount; ++p) n += scaling::form_uses(form, p);
  return n;
}

double frontier_loss(const scaling::ScalingLaw& law, double compute) {
  return law.form == LawForm::kCompute ? law.loss_at_compute(compute)
                                       : scaling::compute_optimal(law, compute).loss;
}

double compute_for_loss(const scaling::ScalingLaw& law, double loss) {
  if (!(loss > law.E)) return INFINITY;
  // The frontier's loss falls monotonically with compute: bisect in log C.
  double lo = 0, hi = 200 * std::log(10.0);
  if (frontier_loss(law, std::exp(hi)) > loss) return INFINITY;
  if (frontier_loss(law, std::exp(lo)) <= loss) return std::exp(lo);
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (frontier_loss(law, std::exp(mid)) > loss ? lo : hi) = mid;
  }
  return std::exp(0.5 * (lo + hi));
}

Comparison compare_arms(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                        const std::string& column, int resamples, uint64_t seed) {
  Comparison c;
  c.loss_column = column;
  c.resamples = resamples;
  const std::vector<ArmRuns> runs = group_runs(jobs, results, column);
  c.spread = spread_of(runs);
  for (size_t k = 0; k < runs.size(); ++k)
    c.arms.push_back(
        fit_arm(runs[k], k, jobs.front().budget_is_flops, column, c.spread.sd, resamples, seed));
  const ArmFit& first = c.arms.front();
  for (const Optimum& o : first.optima) {
    Reference ref;
    ref.compute = o.compute;
    ref.loss = frontier_loss(first.law, o.compute);
    for (size_t k = 1; k < c.arms.size(); ++k)
      if (!c.arms[k].pointwise) ref.multipliers.push_back(multiplier(first, c.arms[k], ref.loss));
    c.references.push_back(std::move(ref));
  }
  c.pointwise = pointwise_rows(c.arms);
  return c;
}

SeedSpread seed_spread(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                       const std::string& column) {
  return spread_of(group_runs(jobs, results, column));
}

}  // namespace k3::sweep
