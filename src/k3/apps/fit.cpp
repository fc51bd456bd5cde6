// `k3lab fit DATA.csv --params COL --tokens COL --loss COL`: fits the scaling law
// L(N, D) = E + A/N^alpha + B/D^beta (or L(C) = E + A/C^alpha with --form c) to the runs of a CSV
// file and prints the parameters, bootstrap intervals and compute-optimal splits (docs/scaling.md).
#include "k3/scaling/fit.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "k3/apps/commands.h"
#include "k3/apps/number_option.h"
#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/svg_plot.h"
#include "k3/scaling/compute_optimal.h"
#include "k3/scaling/fit_plot.h"
#include "k3/scaling/scaling_csv.h"

namespace k3::apps {
namespace {

using namespace k3::scaling;

struct FitArgs {
  std::string data, svg, grid, form = "nd";
  scaling::ScalingColumns columns;
  std::vector<std::string> where, fix;
  std::vector<double> budgets;
  double huber_delta = 1e-3, drop_outliers = 0;
  int bootstrap = 0;
  uint64_t seed = 0;
  bool json = false;
};

std::pair<std::string, std::string> split_assignment(const std::string& text, const char* option) {
  const size_t eq = text.find('=');
  K3_CHECK(eq != std::string::npos && eq > 0, option, " '", text, "' is not NAME=VALUE");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

// --fix NAME=VALUE: E, A, B in natural units (held at their log), alpha and beta as they are.
void apply_fix(FitOptions& o, const std::string& text) {
  const auto [name, value_text] = split_assignment(text, "--fix");
  size_t used = 0;
  double v = NAN;
  try {
    v = std::stod(value_text, &used);
  } catch (const std::exception&) {
  }
  K3_CHECK(used == value_text.size() && std::isfinite(v), "--fix '", text, "': '", value_text,
           "' is not a number");
  const bool log_scale = name == "E" || name == "A" || name == "B";
  const int p = name == "A"       ? kLogA
                : name == "B"     ? kLogB
                : name == "E"     ? kLogE
                : name == "alpha" ? kAlpha
                : name == "beta"  ? kBeta
                                  : -1;
  K3_CHECK(p >= 0, "--fix '", text, "': unknown term '", name, "' (E, A, B, alpha, beta)");
  K3_CHECK(form_uses(o.form, p), "--fix '", text, "': form ", law_form_name(o.form), " has no ",
           name);
  K3_CHECK(!log_scale || v > 0, "--fix '", text, "': ", name, " must be > 0");
  o.fixed[p] = log_scale ? std::log(v) : v;
}

// A parameter in natural units (E, A, B from their logs) with its bootstrap interval.
struct Reported {
  const char* name;
  int param;
  bool log_scale;
};
constexpr Reported kReported[] = {{"E", kLogE, true},
                                  {"A", kLogA, true},
                                  {"B", kLogB, true},
                                  {"alpha", kAlpha, false},
                                  {"beta", kBeta, false}};

double natural(const Reported& r, double v) { return r.log_scale ? std::exp(v) : v; }

// Why a bootstrap interval says the runs do not pin a term down, or "" when they do: it reaches 0,
// has no upper end, or spans more than an order of magnitude.
std::string weakly_identified(const Reported& r, const Interval& i) {
  const double lo = natural(r, i.lo), hi = natural(r, i.hi);
  if (!(lo > 0)) return "the interval reaches 0";
  if (!std::isfinite(hi)) return "the interval has no upper end";
  const double decades = std::log10(hi / lo);
  return decades > 1 ? strprintf("the interval spans %.1f orders of magnitude", decades) : "";
}

void run_fit(const FitArgs& a) {
  FitOptions o;
  o.form = parse_law_form(a.form);
  o.huber_delta = a.huber_delta;
  if (!a.grid.empty()) o.grid.override_axes(a.grid);
  for (const std::string& f : a.fix) apply_fix(o, f);
  size_t free = 0;
  for (int p = 0; p < kParamCount; ++p) free += form_uses(o.form, p) && !o.fixed[p];
  scaling::ScalingColumns columns = a.columns;
  for (const std::string& w : a.where) columns.where.push_back(split_assignment(w, "--where"));

  ScalingRuns runs = read_scaling_csv(a.data, columns, free + 1);
  FitPoints points = make_fit_points(o.form, runs.params, runs.tokens, runs.loss);
  FitResult fit = fit_scaling_law(points, o);
  std::vector<size_t> dropped_lines;
  if (a.drop_outliers > 0) {
    const std::vector<size_t> out =
        outlier_indices(log_residuals(points, fit.theta), a.drop_outliers);
    if (!out.empty()) {
      ScalingRuns kept;
      for (size_t i = 0, j = 0; i < runs.loss.size(); ++i) {
        if (j < out.size() && out[j] == i) {
          dropped_lines.push_back(runs.lines[i]), ++j;
          continue;
        }
        kept.params.push_back(runs.params[i]), kept.tokens.push_back(runs.tokens[i]);
        kept.loss.push_back(runs.loss[i]), kept.lines.push_back(runs.lines[i]);
      }
      K3_CHECK_CTX(kept.loss.size() >= free + 1, (ErrorContext{a.data, "", -1}), "--drop-outliers ",
                   a.drop_outliers, " leaves ", kept.loss.size(), " rows, the fit needs at least ",
                   free + 1);
      runs = std::move(kept);
      points = make_fit_points(o.form, runs.params, runs.tokens, runs.loss);
      const double first_seconds = fit.seconds;
      fit = fit_scaling_law(points, o);
      fit.seconds += first_seconds;
    }
  }
  const ScalingLaw law = fit.law(o.form);
  std::array<Interval, kParamCount> intervals;
  if (a.bootstrap > 0)
    intervals = percentile_intervals(bootstrap_fits(points, o, fit, a.bootstrap, a.seed));

  std::vector<ComputeOptimal> optimal;
  for (double c : a.budgets) {
    if (o.form == LawForm::kCompute)
      optimal.push_back({c, NAN, NAN, law.loss_at_compute(c)});
    else
      optimal.push_back(compute_optimal(law, c));
  }
  if (!a.svg.empty())
    write_svg(a.svg, render_fit_svg(law, runs, std::filesystem::path(a.data).filename().string()));

  if (a.json) {
    nlohmann::json j;
    j["form"] = law_form_name(o.form);
    j["points"] = runs.loss.size();
    j["dropped_lines"] = dropped_lines;
    j["huber_delta"] = o.huber_delta;
    for (const Reported& r : kReported) {
      if (!form_uses(o.form, r.param)) continue;
      j[r.name] = natural(r, fit.theta[r.param]);
      if (o.fixed[r.param]) j["fixed"].push_back(r.name);
      if (a.bootstrap > 0 && !o.fixed[r.param]) {
        j["intervals"][r.name] = {natural(r, intervals[r.param].lo),
                                  natural(r, intervals[r.param].hi)};
        if (!weakly_identified(r, intervals[r.param]).empty())
          j["weakly_identified"].push_back(r.name);
      }
    }
    j["objective"] = fit.objective;
    j["best_start_objective"] = fit.best_start_objective;
    j["starts"] = fit.starts;
    j["best_start"] = fit.best_start;
    j["seconds"] = fit.seconds;
    j["compute_optimal"] = nlohmann::json::array();
    for (const ComputeOptimal& c : optimal) {
      nlohmann::json row{{"compute", c.compute}, {"loss", c.loss}};
      if (o.form == LawForm::kParamsTokens)
        row["params"] = c.params, row["tokens"] = c.tokens,
        row["tokens_per_param"] = c.tokens_per_param();
      j["compute_optimal"].push_back(row);
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf(
      "%s: %zu points, L = %s\n", a.data.c_str(), runs.loss.size(),
      o.form == LawForm::kCompute ? "E + A/C^alpha (C = 6 N D)" : "E + A/N^alpha + B/D^beta");
  if (!dropped_lines.empty()) {
    std::printf("dropped %zu outliers (residual beyond %g robust sd), lines", dropped_lines.size(),
                a.drop_outliers);
    for (size_t l : dropped_lines) std::printf(" %zu", l);
    std::printf("\n");
  }
  std::printf(
      "objective %.9g (sum of Huber, delta %g; %.9g at the best of %lld starts, start %lld), "
      "%.2f s\n",
      fit.objective, o.huber_delta, fit.best_start_objective, static_cast<long long>(fit.starts),
      static_cast<long long>(fit.best_start), fit.seconds);
  for (const Reported& r : kReported) {
    if (!form_uses(o.form, r.param)) continue;
    std::printf("  %-5s = %-12.6g", r.name, natural(r, fit.theta[r.param]));
    if (o.fixed[r.param]) {
      std::printf(" (fixed)");
    } else if (a.bootstrap > 0) {
      const Interval& i = intervals[r.param];
      std::printf(" 95%% [%.4g, %.4g]", natural(r, i.lo), natural(r, i.hi));
      const std::string weak = weakly_identified(r, i);
      if (!weak.empty()) std::printf("  weakly identified: %s", weak.c_str());
    }
    std::printf("\n");
  }
  if (a.bootstrap > 0)
    std::printf("(intervals: %d bootstrap resamples of the points, central 95%%)\n", a.bootstrap);
  if (!optimal.empty()) {
    if (o.form == LawForm::kCompute) {
      std::printf("%12s %10s\n", "C (FLOPs)", "loss");
      for (const ComputeOptimal& c : optimal) std::printf("%12.4g %10.5g\n", c.compute, c.loss);
    } else {
      std::printf("compute-optimal (C = 6 N D):\n%12s %12s %12s %10s %10s\n", "C (FLOPs)", "N_opt",
                  "D_opt", "D/N", "loss");
      for (const ComputeOptimal& c : optimal)
        std::printf("%12.4g %12.4g %12.4g %10.2f %10.5g\n", c.compute, c.params, c.tokens,
                    c.tokens_per_param(), c.loss);
    }
  }
  if (!a.svg.empty()) std::printf("%s\n", a.svg.c_str());
}

}  // namespace

void add_fit(CLI::App& app) {
  auto a = std::make_shared<FitArgs>();
  auto* cmd = app.add_subcommand(
      "fit", "Fit a scaling law L(N, D) = E + A/N^alpha + B/D^beta to runs in a CSV file");
  cmd->add_option("data", a->data, "CSV file with a header row")->required();
  cmd->add_option("--params", a->columns.params, "Column of the parameter counts N")->required();
  cmd->add_option("--tokens", a->columns.tokens, "Column of the training tokens D")->required();
  cmd->add_option("--loss", a->columns.loss, "Column of the losses")->required();
  cmd->add_option("--where", a->where, "Keep only rows with COLUMN=VALUE (repeatable)");
  cmd->add_option("--form", a->form, "nd: E + A/N^alpha + B/D^beta; c: E + A/C^alpha, C = 6 N D")
      ->capture_default_str();
  add_number(cmd, "--huber-delta", a->huber_delta, "Huber loss delta on log-loss residuals",
             Bounds<double>{0, kUnbounded, true});
  cmd->add_option(
      "--grid", a->grid,
      "Start grid axes replacing the default, e.g. alpha=0:2:0.5,a=5 (a, b, e are logs)");
  cmd->add_option("--fix", a->fix, "Hold a term: E=1.69, A=406, B=411, alpha=0.34, beta=0.28");
  add_number(cmd, "--drop-outliers", a->drop_outliers,
             "Refit without points whose log residual is beyond K robust standard deviations (0: "
             "none)",
             Bounds<double>{0, kUnbounded});
  add_number(cmd, "--bootstrap", a->bootstrap, "Bootstrap resamples for 95% intervals (0: none)",
             Bounds<int>{0, kMaxResamples});
  add_number(cmd, "--seed", a->seed, "Seed of the bootstrap resamples");
  cmd->add_option_function<std::vector<std::string>>(
         "--budgets",
         [a](const std::vector<std::string>& texts) {
           for (const std::string& t : texts)
             a->budgets.push_back(
                 parse_number("--budgets", t, Bounds<double>{0, kUnbounded, true}));
         },
         "Compute budgets C for the compute-optimal N, D")
      ->delimiter(',');
  cmd->add_option("--svg", a->svg, "Draw the fit to this SVG file");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a] { run_fit(*a); });
}

}  // namespace k3::apps
