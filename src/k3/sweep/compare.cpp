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

// Pooled: a point of two or three seeds has one or two degrees of freedom, too few for an sd of
// its own, and the
// spread between seeds is taken to be a property of the training rather than of one point, so
// the squared deviations from each point's mean are summed over all points and divided by all
// their degrees of freedom (n - 1 each): one estimate that uses every seed.
SeedSpread spread_of(const std::vector<ArmRuns>& arms) {
  SeedSpread s;
  double squares = 0;
  int64_t degrees = 0;
  for (const ArmRuns& a : arms)
    for (const SizeRuns& size : a.sizes)
      for (const GridPoint& p : size.points) {
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

int free_variables(LawForm form) {
  int n = 0;
  for (int p = 0; p < scaling::kParamCount; ++p) n += scaling::form_uses(form, p);
  return n;
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

namespace {

// A ratio with its interval and the resamples in which a law never reaches the loss:
// "1.2x [0.9, 1.5] (3)"; "never" where the point estimate has no finite, positive value.
std::string ratio_cell(const Multiplier& m, int resamples) {
  std::string cell = std::isfinite(m.value) && m.value > 0 ? strprintf("%.3gx", m.value) : "never";
  if (resamples > 0) cell += strprintf(" [%.3g, %.3g]", m.interval.lo, m.interval.hi);
  if (m.unreachable > 0) cell += strprintf(" (%lld)", static_cast<long long>(m.unreachable));
  return cell;
}

std::string describe_spread(const Comparison& c) {
  const SeedSpread& s = c.spread;
  if (s.points == 0) return "";
  const std::string seeds = s.min_seeds == s.max_seeds
                                ? strprintf("%lld", static_cast<long long>(s.min_seeds))
                                : strprintf("%lld to %lld", static_cast<long long>(s.min_seeds),
                                            static_cast<long long>(s.max_seeds));
  return strprintf("seed spread: sd %.4g over %lld points with %s seeds (pooled), %s\n", s.sd,
                   static_cast<long long>(s.points), seeds.c_str(),
                   c.resamples > 0 ? "added to every resample" : "unused without resamples");
}

std::string describe_arm(const Comparison& c, const ArmFit& a, double entropy_floor) {
  std::string s = strprintf("\n%s\n%12s %12s %10s %10s %6s %10s  %s\n", a.arm.c_str(), "N", "D",
                            "C (6ND)", "best lr", "batch", "loss", "lrs tried");
  for (const Optimum& o : a.optima)
    s += strprintf("%12.4g %12.4g %10.3g %10.3g %6lld %10.5f  %lld%s\n", o.params, o.tokens,
                   o.compute, o.lr, static_cast<long long>(o.batch_size), o.loss,
                   static_cast<long long>(o.tried),
                   o.lr_at_edge ? "  (best at the grid's edge: widen the lr grid)" : "");
  const bool form_c = a.form == scaling::LawForm::kCompute;
  if (a.pointwise)
    return s + strprintf(
                   "no law: %zu sizes, the fit of L%s needs at least %d; compared point by "
                   "point through %s's law\n",
                   a.optima.size(), form_c ? "(C)" : "(N, D)", free_variables(a.form) + 1,
                   c.arms.front().arm.c_str());
  s += strprintf("fit L = %s, objective %.3g over %lld starts\n",
                 form_c ? "E + A/C^alpha" : "E + A/N^alpha + B/D^beta", a.fit.objective,
                 static_cast<long long>(a.fit.starts));
  auto term = [&](const char* name, int p, double v, bool log_space) {
    if (!scaling::form_uses(a.form, p)) return;
    s += strprintf("  %-5s %-12.5g", name, v);
    if (c.resamples > 0) {
      const scaling::Interval& i = a.intervals[p];
      s += strprintf(" 95%% [%.4g, %.4g]", log_space ? std::exp(i.lo) : i.lo,
                     log_space ? std::exp(i.hi) : i.hi);
    }
    s += "\n";
  };
  term("E", scaling::kLogE, a.law.E, true);
  term("A", scaling::kLogA, a.law.A, true);
  term("alpha", scaling::kAlpha, a.law.alpha, false);
  term("B", scaling::kLogB, a.law.B, true);
  term("beta", scaling::kBeta, a.law.beta, false);
  if (std::isfinite(entropy_floor) && !c.loss_column.starts_with("ood_"))
    s += strprintf("  E beside the corpus's entropy floor %.4f: %+.4f\n", entropy_floor,
                   a.law.E - entropy_floor);
  return s;
}

std::string describe_multipliers(const Comparison& c) {
  if (c.references.empty() || c.references.front().multipliers.empty()) return "";
  const char* first = c.arms.front().arm.c_str();
  std::string s = strprintf(
      "\ncompute multiplier at equal loss: the compute an arm needs for the loss %s's fit "
      "reaches at each of its sizes, over %s's%s\n",
      first, first,
      c.resamples > 0
          ? strprintf(" (95%% intervals over %d bootstrap resamples of each arm's optima%s)",
                      c.resamples, c.spread.sd > 0 ? ", with seed noise" : "")
                .c_str()
          : "");
  s += strprintf("%10s %10s", "C", "loss");
  for (const Multiplier& m : c.references.front().multipliers)
    s += strprintf(" %28s", m.arm.c_str());
  s += "\n";
  for (const Reference& r : c.references) {
    s += strprintf("%10.3g %10.5f", r.compute, r.loss);
    for (const Multiplier& m : r.multipliers)
      s += strprintf(" %28s", ratio_cell(m, c.resamples).c_str());
    s += "\n";
  }
  return s +
         "(never: the arm's fit does not reach that loss; (n): resamples in which an arm's fit "
         "never reaches it, counted as 0x or infinite)\n";
}

std::string describe_pointwise(const Comparison& c) {
  if (c.pointwise.empty()) return "";
  const char* first = c.arms.front().arm.c_str();
  std::string s = strprintf(
      "\neffective compute, point by point (arms with too few sizes for a law): at each of an "
      "arm's optima, its compute over the compute %s's fit needs for the same loss; above 1, the "
      "arm needs more%s\n",
      first,
      c.resamples > 0
          ? strprintf(" (95%% intervals over %d bootstrap resamples of %s's optima%s)", c.resamples,
                      first, c.spread.sd > 0 ? ", with seed noise on every arm's runs" : "")
                .c_str()
          : "");
  s += strprintf("%10s %10s", "size", "budget");
  for (const Multiplier& m : c.pointwise.front().ratios) s += strprintf(" %28s", m.arm.c_str());
  const bool products = c.pointwise.front().ratios.size() > 1;
  if (products) s += strprintf(" %28s", "product");
  s += "\n";
  for (const PointwiseRow& row : c.pointwise) {
    s += strprintf("%10.6g %10.6g", row.target, row.budget);
    for (const Multiplier& m : row.ratios)
      s += strprintf(" %28s", std::isnan(m.value) ? "-" : ratio_cell(m, c.resamples).c_str());
    if (products)
      s += strprintf(" %28s", row.product ? ratio_cell(*row.product, c.resamples).c_str() : "-");
    s += "\n";
  }
  s += strprintf(
      "(never: %s's fit does not get down to the arm's loss, a ratio of 0; (n): "
      "resamples in which it does not; -: no optimum at that size)\n",
      first);
  if (products)
    s += "(product: the one-at-a-time ratios multiplied, per resample for its interval; to be set "
         "beside the multiplier of an arm that differs in all of them, not a measurement of one)\n";
  return s;
}

}  // namespace

std::string describe(const Comparison& c, double entropy_floor) {
  std::string s = strprintf("loss: %s; each arm's best learning rate and batch size per size:\n",
                            c.loss_column.c_str());
  s += describe_spread(c);
  for (const ArmFit& a : c.arms) s += describe_arm(c, a, entropy_floor);
  return s + describe_multipliers(c) + describe_pointwise(c);
}

std::string comparison_json(const Comparison& c) {
  using nlohmann::json;
  auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  auto ratio = [&](const Multiplier& m) {
    return json{{"arm", m.arm},
                {"value", number(m.value)},
                {"interval", {number(m.interval.lo), number(m.interval.hi)}},
                {"unreachable", m.unreachable}};
  };
  json j{{"loss", c.loss_column}, {"resamples", c.resamples},    {"seed_spread", nullptr},
         {"arms", json::array()}, {"references", json::array()}, {"pointwise", json::array()}};
  if (c.spread.points > 0)
    j["seed_spread"] = {{"sd", c.spread.sd},
                        {"points", c.spread.points},
                        {"min_seeds", c.spread.min_seeds},
                        {"max_seeds", c.spread.max_seeds}};
  for (const ArmFit& a : c.arms) {
    json arm{{"arm", a.arm},
             {"form", scaling::law_form_name(a.form)},
             {"pointwise", a.pointwise},
             {"optima", json::array()}};
    for (const Optimum& o : a.optima)
      arm["optima"].push_back({{"params", o.params},
                               {"tokens", o.tokens},
                               {"compute", o.compute},
                               {"lr", o.lr},
                               {"batch_size", o.batch_size},
                               {"loss", o.loss},
                               {"lr_at_edge", o.lr_at_edge}});
    if (a.pointwise) {
      j["arms"].push_back(arm);
      continue;
    }
    const std::pair<const char*, double> terms[] = {{"E", a.law.E},
                                                    {"A", a.law.A},
                                                    {"alpha", a.law.alpha},
                                                    {"B", a.law.B},
                                                    {"beta", a.law.beta}};
    const int params[] = {scaling::kLogE, scaling::kLogA, scaling::kAlpha, scaling::kLogB,
                          scaling::kBeta};
    for (int t = 0; t < 5; ++t) {
      if (!scaling::form_uses(a.form, params[t])) continue;
      arm[terms[t].first] = terms[t].second;
      if (c.resamples > 0) {
        const bool log_space = params[t] == scaling::kLogE || params[t] == scaling::kLogA ||
                               params[t] == scaling::kLogB;
        const scaling::Interval& i = a.intervals[params[t]];
        arm["intervals"][terms[t].first] = {number(log_space ? std::exp(i.lo) : i.lo),
                                            number(log_space ? std::exp(i.hi) : i.hi)};
      }
    }
    arm["objective"] = a.fit.objective;
    j["arms"].push_back(arm);
  }
  for (const Reference& r : c.references) {
    json ref{{"compute", r.compute}, {"loss", number(r.loss)}, {"multipliers", json::array()}};
    for (const Multiplier& m : r.multipliers) ref["multipliers"].push_back(ratio(m));
    j["references"].push_back(ref);
  }
  for (const PointwiseRow& row : c.pointwise) {
    json r{{"target", row.target},
           {"budget", row.budget},
           {"ratios", json::array()},
           {"product", row.product ? ratio(*row.product) : json(nullptr)}};
    for (size_t k = 0; k < row.ratios.size(); ++k) {
      json m = ratio(row.ratios[k]);
      m["compute"] = number(row.optima[k].compute);
      m["loss"] = number(row.optima[k].loss);
      r["ratios"].push_back(m);
    }
    j["pointwise"].push_back(r);
  }
  return j.dump(2) + "\n";
}

std::string render_comparison_svg(const Comparison& c) {
  LinePlot p;
  p.title = "k3lab sweep: " + c.loss_column + " against compute, best learning rate per size";
  p.x_label = "log10 C (FLOPs, 6ND)";
  p.y_label = c.loss_column + " (nats/token)";
  for (const ArmFit& a : c.arms) {
    if (a.pointwise) {
      // Its optima as lone points (a gap between each): no law, so no line either.
      PlotSeries points{a.arm + " best (no law)", {}, {}};
      for (const Optimum& o : a.optima) {
        points.x.insert(points.x.end(), {std::log10(o.compute), NAN});
        points.y.insert(points.y.end(), {o.loss, NAN});
      }
      p.series.push_back(std::move(points));
      continue;
    }
    PlotSeries best{a.arm + " best", {}, {}}, fit{a.arm + " fit", {}, {}};
    for (const Optimum& o : a.optima) {
      best.x.push_back(std::log10(o.compute));
      best.y.push_back(o.loss);
    }
    const double lo = std::log10(a.optima.front().compute),
                 hi = std::log10(a.optima.back().compute);
    for (int i = 0; i <= 64; ++i) {
      const double x = lo - 0.25 + (hi - lo + 0.5) * i / 64;
      fit.x.push_back(x);
      fit.y.push_back(frontier_loss(a.law, std::pow(10.0, x)));
    }
    p.series.push_back(std::move(best));
    p.series.push_back(std::move(fit));
  }
  return render_line_plot(p);
}

std::string render_lr_svg(const std::vector<Job>& jobs, const std::vector<JobResult>& results,
                          const std::string& column) {
  LinePlot p;
  p.title = "k3lab sweep: " + column + " against the learning rate, per arm and size";
  p.x_label = "log10 learning rate";
  p.y_label = column + " (nats/token)";
  std::map<std::string, std::map<double, double>> curves;  // "arm N budget" -> lr -> loss
  std::vector<std::string> order;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const std::string name =
        strprintf("%s N=%lld tokens=%lld", j.arm.c_str(), static_cast<long long>(j.shape.params),
                  static_cast<long long>(j.tokens));
    if (!curves.count(name)) order.push_back(name);
    const double loss = loss_of(results[i], column);
    curves[name][j.lr] = results[i].status == "done" && std::isfinite(loss) ? loss : NAN;
  }
  for (const std::string& name : order) {
    PlotSeries s{name, {}, {}};
    for (auto [lr, loss] : curves[name]) {
      s.x.push_back(std::log10(lr));
      s.y.push_back(loss);
    }
    p.series.push_back(std::move(s));
  }
  return render_line_plot(p);
}

}  // namespace k3::sweep
