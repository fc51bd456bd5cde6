#include "k3/sweep/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

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

// Each arm's optima, in the order the arms were planned.
std::vector<std::pair<std::string, std::vector<Optimum>>> find_optima(
    const std::vector<Job>& jobs, const std::vector<JobResult>& results,
    const std::string& column) {
  // (arm, target, budget) -> (lr, batch) -> the losses over seeds, and one of those jobs
  struct Runs {
    std::vector<double> losses;
    const Job* job = nullptr;
  };
  using Point = std::tuple<double, int64_t>;
  std::vector<std::string> arms;
  std::map<std::string, std::map<std::pair<double, double>, std::map<Point, Runs>>> runs;
  std::map<std::string, std::set<double>> lrs_tried;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    if (std::find(arms.begin(), arms.end(), j.arm) == arms.end()) arms.push_back(j.arm);
    lrs_tried[j.arm].insert(j.lr);
    const double loss = loss_of(results[i], column);
    if (results[i].status != "done" || !std::isfinite(loss)) continue;
    Runs& r = runs[j.arm][{j.target, j.budget}][{j.lr, j.batch_size}];
    r.losses.push_back(loss);
    r.job = &j;
  }
  std::vector<std::pair<std::string, std::vector<Optimum>>> out;
  for (const std::string& arm : arms) {
    std::vector<Optimum> optima;
    for (const auto& [key, points] : runs[arm]) {
      Optimum o;
      o.loss = INFINITY;
      const Job* best = nullptr;
      for (const auto& [point, r] : points) {
        double mean = 0;
        for (double l : r.losses) mean += l / static_cast<double>(r.losses.size());
        if (mean < o.loss) o.loss = mean, best = r.job;
      }
      o.target = key.first;
      o.budget = key.second;
      o.lr = best->lr;
      o.batch_size = best->batch_size;
      o.params = static_cast<double>(best->shape.params);
      // D of the best batch size's job (D depends on the batch only through rounding).
      o.tokens = static_cast<double>(best->tokens);
      o.compute = 6.0 * o.params * o.tokens;
      o.lr_at_edge = lrs_tried[arm].size() > 1 &&
                     (o.lr == *lrs_tried[arm].begin() || o.lr == *lrs_tried[arm].rbegin());
      o.tried = static_cast<int64_t>(points.size());
      optima.push_back(o);
    }
    std::sort(optima.begin(), optima.end(),
              [](const Optimum& a, const Optimum& b) { return a.compute < b.compute; });
    out.emplace_back(arm, std::move(optima));
  }
  return out;
}

int free_variables(LawForm form) {
  int n = 0;
  for (int p = 0; p < scaling::kParamCount; ++p) n += scaling::form_uses(form, p);
  return n;
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
  if (!values.empty()) {
    std::sort(values.begin(), values.end());
    auto at = [&](double q) {
      return values[std::min(values.size() - 1, static_cast<size_t>(q * values.size()))];
    };
    m.interval = {at(0.025), at(0.975)};
  }
  return m;
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
  for (auto& [arm, optima] : find_optima(jobs, results, column)) {
    ArmFit a;
    a.arm = arm;
    a.optima = std::move(optima);
    // One tokens-per-parameter budget moves N and D together: only L(C) can be fitted.
    std::set<double> budgets;
    for (const Optimum& o : a.optima) budgets.insert(o.budget);
    a.form = jobs.front().budget_is_flops || budgets.size() > 1 ? LawForm::kParamsTokens
                                                                : LawForm::kCompute;
    const size_t needed = static_cast<size_t>(free_variables(a.form)) + 1;
    K3_CHECK(a.optima.size() >= needed, "arm ", arm, ": ", a.optima.size(),
             " sizes have finished runs with a finite ", column, "; the fit of L",
             a.form == LawForm::kCompute ? "(C)" : "(N, D)", " needs at least ", needed);
    std::vector<double> n, d, l;
    for (const Optimum& o : a.optima) {
      n.push_back(o.params);
      d.push_back(o.tokens);
      l.push_back(o.loss);
    }
    scaling::FitOptions options;
    options.form = a.form;
    const scaling::FitPoints points = scaling::make_fit_points(a.form, n, d, l);
    a.fit = scaling::fit_scaling_law(points, options);
    a.law = a.fit.law(a.form);
    if (resamples > 0) {
      const auto thetas = scaling::bootstrap_fits(points, options, a.fit, resamples, seed);
      a.intervals = scaling::percentile_intervals(thetas);
      for (const auto& t : thetas)
        a.resampled.push_back(scaling::ScalingLaw::from_theta(a.form, t));
    }
    c.arms.push_back(std::move(a));
  }
  const ArmFit& first = c.arms.front();
  for (const Optimum& o : first.optima) {
    Reference ref;
    ref.compute = o.compute;
    ref.loss = frontier_loss(first.law, o.compute);
    for (size_t k = 1; k < c.arms.size(); ++k)
      ref.multipliers.push_back(multiplier(first, c.arms[k], ref.loss));
    c.references.push_back(std::move(ref));
  }
  return c;
}

std::string describe(const Comparison& c, double entropy_floor) {
  std::string s = strprintf("loss: %s; each arm's best learning rate and batch size per size:\n",
                            c.loss_column.c_str());
  for (const ArmFit& a : c.arms) {
    s += strprintf("\n%s\n%12s %12s %10s %10s %6s %10s  %s\n", a.arm.c_str(), "N", "D", "C (6ND)",
                   "best lr", "batch", "loss", "lrs tried");
    for (const Optimum& o : a.optima)
      s += strprintf("%12.4g %12.4g %10.3g %10.3g %6lld %10.5f  %lld%s\n", o.params, o.tokens,
                     o.compute, o.lr, static_cast<long long>(o.batch_size), o.loss,
                     static_cast<long long>(o.tried),
                     o.lr_at_edge ? "  (best at the grid's edge: widen the lr grid)" : "");
    const bool form_c = a.form == scaling::LawForm::kCompute;
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
  }
  if (c.arms.size() > 1) {
    s += strprintf(
        "\ncompute multiplier at equal loss: the compute an arm needs for the loss %s's "
        "fit reaches at each of its sizes, over %s's%s\n",
        c.arms.front().arm.c_str(), c.arms.front().arm.c_str(),
        c.resamples > 0 ? strprintf(" (95%% intervals over %d bootstrap resamples of each arm's "
                                    "optima)",
                                    c.resamples)
                              .c_str()
                        : "");
    s += strprintf("%10s %10s", "C", "loss");
    for (const Multiplier& m : c.references.front().multipliers)
      s += strprintf(" %28s", m.arm.c_str());
    s += "\n";
    for (const Reference& r : c.references) {
      s += strprintf("%10.3g %10.5f", r.compute, r.loss);
      for (const Multiplier& m : r.multipliers) {
        std::string cell = std::isfinite(m.value) ? strprintf("%.3gx", m.value) : "never";
        if (c.resamples > 0) cell += strprintf(" [%.3g, %.3g]", m.interval.lo, m.interval.hi);
        if (m.unreachable > 0) cell += strprintf(" (%lld)", static_cast<long long>(m.unreachable));
        s += strprintf(" %28s", cell.c_str());
      }
      s += "\n";
    }
    s += "(never: the arm's fit does not reach that loss; (n): resamples in which an arm's fit "
         "never reaches it, counted as 0x or infinite)\n";
  }
  return s;
}

std::string comparison_json(const Comparison& c) {
  using nlohmann::json;
  auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j{{"loss", c.loss_column},
         {"resamples", c.resamples},
         {"arms", json::array()},
         {"references", json::array()}};
  for (const ArmFit& a : c.arms) {
    json arm{{"arm", a.arm}, {"form", scaling::law_form_name(a.form)}, {"optima", json::array()}};
    for (const Optimum& o : a.optima)
      arm["optima"].push_back({{"params", o.params},
                               {"tokens", o.tokens},
                               {"compute", o.compute},
                               {"lr", o.lr},
                               {"batch_size", o.batch_size},
                               {"loss", o.loss},
                               {"lr_at_edge", o.lr_at_edge}});
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
    for (const Multiplier& m : r.multipliers)
      ref["multipliers"].push_back({{"arm", m.arm},
                                    {"value", number(m.value)},
                                    {"interval", {number(m.interval.lo), number(m.interval.hi)}},
                                    {"unreachable", m.unreachable}});
    j["references"].push_back(ref);
  }
  return j.dump(2) + "\n";
}

std::string render_comparison_svg(const Comparison& c) {
  LinePlot p;
  p.title = "k3lab sweep: " + c.loss_column + " against compute, best learning rate per size";
  p.x_label = "log10 C (FLOPs, 6ND)";
  p.y_label = c.loss_column + " (nats/token)";
  for (const ArmFit& a : c.arms) {
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
