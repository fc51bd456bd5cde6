#include "k3/train/loss_plot.h"

#include <cmath>

#include "k3/base/svg_plot.h"
#include "k3/data/corpus_entropy.h"
#include "k3/train/metrics.h"

namespace k3::train {

double data_loss_floor(const RunConfig& config) {
  return config.data.source == "builtin" ? data::corpus_entropy_nats_per_token() : NAN;
}

std::string write_loss_plot(const std::string& run_dir, const RunConfig& config) {
  auto m = read_metrics(metrics_path(run_dir));
  LinePlot p;
  p.title = "k3lab: " + config.run.name;
  p.x_label = "step";
  p.y_label = "loss (nats/token)";
  for (auto [key, label] : {std::pair{"loss", "train"}, {"val_loss", "validation"}})
    if (m.count(key)) p.series.push_back({label, m[key].steps, m[key].values});
  const double floor = data_loss_floor(config);
  if (std::isfinite(floor) && m.count("loss") && !m["loss"].steps.empty())
    p.series.push_back(
        {"entropy floor", {m["loss"].steps.front(), m["loss"].steps.back()}, {floor, floor}});
  const std::string path = run_dir + "/loss.svg";
  write_svg(path, render_line_plot(p));
  return path;
}

}  // namespace k3::train
