#include "k3/train/observe/loss_plot.h"

#include <cmath>

#include "k3/base/svg_plot.h"
#include "k3/data/corpus_entropy.h"
#include "k3/train/observe/metrics.h"

namespace k3::train {

double data_loss_floor(const RunConfig& config) {
  return config.data.source == "builtin" ? data::corpus_entropy_nats_per_token() : NAN;
}

LinePlot loss_plot(const std::map<std::string, MetricSeries>& metrics, double floor,
                   const std::string& title) {
  LinePlot p;
  p.title = title;
  p.x_label = "step";
  p.y_label = "loss (nats/token)";
  for (auto [key, label] : {std::pair{"loss", "train"}, {"val_loss", "validation"}})
    if (auto it = metrics.find(key); it != metrics.end())
      p.series.push_back({label, it->second.steps, it->second.values});
  if (auto it = metrics.find("loss");
      std::isfinite(floor) && it != metrics.end() && !it->second.steps.empty())
    p.series.push_back(
        {"entropy floor", {it->second.steps.front(), it->second.steps.back()}, {floor, floor}});
  return p;
}

std::string write_loss_plot(const std::string& run_dir, const RunConfig& config) {
  const LinePlot p = loss_plot(read_metrics(metrics_path(run_dir)), data_loss_floor(config),
                               "k3lab: " + config.run.name);
  const std::string path = run_dir + "/loss.svg";
  write_svg(path, render_line_plot(p));
  return path;
}

}  // namespace k3::train
