// `k3lab schedule --type cosine|wsd|constant [--steps N --warmup W --decay-fraction f
//   --decay-shape linear|sqrt|exp --min-lr-ratio r --lr x] [--plot out.svg]`:
// the learning rate of every step, its values at the phase boundaries, and a plot.
// `k3lab schedule pipeline ...` shows a pipeline schedule instead (pipeline_schedule.cpp).
#include "k3/optim/schedule.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/base/svg_plot.h"

namespace k3::apps {
namespace {

constexpr int64_t kMaxPlotPoints = 2000;

void print_boundaries(const optim::Schedule& s) {
  std::vector<std::pair<int64_t, std::string>> rows = {{0, "first step"}};
  if (s.warmup_steps > 0) rows.push_back({s.warmup_steps - 1, "warmup end (peak)"});
  const int64_t start = s.decay_start();
  if (start < s.total_steps) {
    if (s.kind == optim::ScheduleKind::wsd && start > s.warmup_steps)
      rows.push_back({start - 1, "last stable step"});
    rows.push_back({start, "decay start"});
    rows.push_back({start + (s.total_steps - start) / 2 - 1, "decay halfway"});
  }
  rows.push_back({s.total_steps - 1, "final step"});
  std::sort(rows.begin(), rows.end());
  std::printf("%10s  %-20s %12s %10s\n", "step", "boundary", "lr", "lr / peak");
  for (const auto& [step, what] : rows)
    std::printf("%10lld  %-20s %12.6g %10.4f\n", static_cast<long long>(step), what.c_str(),
                s.lr(step), s.lr(step) / s.peak_lr);
  if (s.kind != optim::ScheduleKind::constant)
    std::printf("floor: %.6g (min_lr_ratio %.4g x peak %.6g)\n", s.peak_lr * s.min_lr_ratio,
                s.min_lr_ratio, s.peak_lr);
}

void plot(const optim::Schedule& s, const std::string& path) {
  PlotSeries series{"lr", {}, {}};
  const int64_t stride = std::max<int64_t>(1, s.total_steps / kMaxPlotPoints);
  for (int64_t step = 0; step < s.total_steps; step += stride) {
    series.x.push_back(static_cast<double>(step));
    series.y.push_back(s.lr(step));
  }
  if (series.x.back() != static_cast<double>(s.total_steps - 1)) {  // always end on the final step
    series.x.push_back(static_cast<double>(s.total_steps - 1));
    series.y.push_back(s.lr(s.total_steps - 1));
  }
  std::string title = std::string("learning rate: ") + optim::schedule_kind_name(s.kind);
  if (s.kind == optim::ScheduleKind::wsd)
    title += std::string(", ") + optim::decay_shape_name(s.decay_shape) + " decay over the last " +
             std::to_string(s.total_steps - s.decay_start()) + " steps";
  write_svg(path, render_line_plot({title, "step", "learning rate", {series}}));
  std::printf("plot: %s\n", path.c_str());
}

}  // namespace

void add_schedule(CLI::App& app) {
  struct Args {
    std::string type = "cosine", decay_shape = "linear", plot;
    int64_t steps = 1000;
    double warmup = 0.01, decay_fraction = 0.2, min_lr_ratio = 0.1, lr = 3e-3;
  };
  auto a = std::make_shared<Args>();
  auto* cmd =
      app.add_subcommand("schedule", "Show a learning-rate schedule: boundary values and a plot");
  cmd->add_option("--type", a->type, "cosine, wsd or constant")->capture_default_str();
  cmd->add_option("--steps", a->steps, "Steps in the run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "Warmup: a fraction of the steps when below 1, else steps")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--decay-fraction", a->decay_fraction, "wsd: share of the steps spent decaying")
      ->capture_default_str();
  cmd->add_option("--decay-shape", a->decay_shape, "wsd: linear, sqrt (1 - sqrt) or exp")
      ->capture_default_str();
  cmd->add_option("--min-lr-ratio", a->min_lr_ratio, "The floor, as a fraction of the peak")
      ->capture_default_str();
  cmd->add_option("--lr", a->lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--plot", a->plot, "Write the schedule as an SVG plot");
  add_pipeline_schedule(*cmd);
  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;  // `schedule pipeline` ran instead
    optim::Schedule s{.kind = optim::parse_schedule_kind(a->type),
                      .peak_lr = static_cast<float>(a->lr),
                      .total_steps = a->steps,
                      .warmup_steps = optim::warmup_steps_from(a->warmup, a->steps),
                      .min_lr_ratio = static_cast<float>(a->min_lr_ratio),
                      .decay_fraction = a->decay_fraction,
                      .decay_shape = optim::parse_decay_shape(a->decay_shape)};
    s.validate();
    print_boundaries(s);
    if (!a->plot.empty()) plot(s, a->plot);
  });
}

}  // namespace k3::apps
