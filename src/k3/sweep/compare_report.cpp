// The comparison as text, JSON and SVG (compare.h).
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "k3/base/format.h"
#include "k3/base/svg_plot.h"
#include "k3/sweep/compare.h"

namespace k3::sweep {

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
  return strprintf("seed spread: sd %.4g over %lld points with %s seeds (pooled over each size's best lr "
                   "and its neighbours), %s\n", s.sd,
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
