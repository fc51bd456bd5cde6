#include "k3/train/observe/run_report.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/svg_plot.h"
#include "k3/train/config/run_config.h"
#include "k3/train/observe/expert_load.h"
#include "k3/train/observe/loss_plot.h"
#include "k3/train/observe/metrics.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The raw records of metrics.jsonl (the per-rank arrays among them), skipping cut lines.
std::vector<json> metric_records(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step")) out.push_back(std::move(j));
  }
  return out;
}

// An SVG document as an element of the page: without its XML declaration.
std::string inline_svg(const std::string& svg) {
  const size_t at = svg.find("<svg");
  return at == std::string::npos ? svg : svg.substr(at);
}

class Page {
 public:
  void plot(const std::string& id, const std::string& title, const std::string& svg) {
    body_ += "<section class=\"plot\" id=\"plot-" + id + "\"><h2>" + xml_escape(title) + "</h2>\n" +
             inline_svg(svg) + "\n</section>\n";
    report_.plots.push_back(id);
  }
  void missing(const std::string& id, const std::string& title, const std::string& why) {
    body_ += "<section class=\"plot missing\" id=\"plot-" + id + "\"><h2>" + xml_escape(title) +
             "</h2><p>Not in this run: " + xml_escape(why) + ".</p></section>\n";
    report_.missing.push_back(id + ": " + why);
  }
  std::string html(const std::string& title) const {
    return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
           xml_escape(title) +
           "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1000px}"
           "section{margin-bottom:2em}.missing p{color:#777}svg{max-width:100%;height:auto}"
           "</style></head>\n<body><h1>" +
           xml_escape(title) + "</h1>\n" + body_ + "</body></html>\n";
  }
  RunReport& report() { return report_; }

 private:
  std::string body_;
  RunReport report_;
};

LinePlot series_plot(const std::map<std::string, MetricSeries>& m,
                     const std::vector<std::pair<std::string, std::string>>& keys,
                     const std::string& y_label, double scale = 1, bool log_y = false) {
  LinePlot p;
  p.x_label = "step";
  p.y_label = y_label;
  p.log_y = log_y;
  for (const auto& [key, label] : keys)
    if (auto it = m.find(key); it != m.end()) {
      PlotSeries s{label, it->second.steps, it->second.values};
      for (double& y : s.y) y *= scale;
      p.series.push_back(std::move(s));
    }
  return p;
}

// The values of the array field KEY of each record, by rank, as a heatmap over the steps.
Heatmap per_rank_heatmap(const std::vector<json>& records, const std::string& key,
                         const std::string& title, const std::string& value_label) {
  Heatmap h;
  h.title = title;
  h.x_label = "step";
  h.y_label = "rank";
  h.value_label = value_label;
  for (const json& r : records) {
    if (!r.contains(key) || !r[key].is_array()) continue;
    const size_t ranks = r[key].size();
    if (h.values.size() < ranks) h.values.resize(ranks);
    h.column_labels.push_back(std::to_string(r["step"].get<int64_t>()));
    for (size_t k = 0; k < ranks; ++k)
      h.values[k].push_back(r[key][k].is_number() ? r[key][k].get<double>() : NAN);
  }
  for (size_t k = 0; k < h.values.size(); ++k) h.row_labels.push_back(std::to_string(k));
  return h;
}

// Chrome trace: the steps end to end on the lead, its time blocked in each group's collectives
// from each step's start (metrics record the time, not where in the step it fell), and the
// pipeline's measured step, placed at that step.
json chrome_trace(const std::vector<json>& records, const std::string& pipeline_path) {
  constexpr int kLead = 1000;
  json events = json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", kLead},
                    {"args", {{"name", "rank 0 (metrics.jsonl)"}}}});
  std::map<std::string, int> lanes{{"step", 0}};
  std::map<int64_t, double> starts;  // step -> its start, microseconds
  double t = 0;
  for (const json& r : records) {
    const int64_t step = r["step"].get<int64_t>();
    const double secs = r.value("step_seconds", 0.0);
    starts[step] = t;
    events.push_back({{"ph", "X"},
                      {"name", "step " + std::to_string(step)},
                      {"cat", "step"},
                      {"pid", kLead},
                      {"tid", 0},
                      {"ts", t},
                      {"dur", secs * 1e6},
                      {"args", {{"loss", r.value("loss", 0.0)}}}});
    for (auto it = r.begin(); it != r.end(); ++it) {
      const std::string& k = it.key();
      const size_t dot = k.rfind(".seconds");
      if (k.rfind("comm.", 0) != 0 || dot == std::string::npos || dot + 8 != k.size() ||
          !it->is_number() || it->get<double>() <= 0)
        continue;
      const std::string group = k.substr(5, dot - 5);
      if (group.find('.') != std::string::npos) continue;
      const int lane = lanes.emplace(group, static_cast<int>(lanes.size())).first->second;
      events.push_back({{"ph", "X"},
                        {"name", group + " collectives"},
                        {"cat", "communication"},
                        {"pid", kLead},
                        {"tid", lane},
                        {"ts", t},
                        {"dur", it->get<double>() * 1e6},
                        {"args",
                         {{"bytes", r.value("comm." + group + ".bytes", 0.0)},
                          {"calls", r.value("comm." + group + ".calls", 0.0)}}}});
    }
    t += secs * 1e6;
  }
  for (const auto& [name, lane] : lanes)
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", kLead},
                      {"tid", lane},
                      {"args", {{"name", name == "step" ? "steps" : name + " (blocked)"}}}});
  if (fs::exists(pipeline_path)) {
    const json p = json::parse(read_file(pipeline_path), nullptr, false);
    if (p.is_object() && p.contains("traceEvents")) {
      const auto at = starts.find(p.value("step", int64_t{0}));
      const double offset = at == starts.end() ? 0 : at->second;
      for (json e : p["traceEvents"]) {
        if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + offset;
        events.push_back(std::move(e));
      }
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace

RunReport write_run_report(const std::string& run_dir) {
  const std::string metrics_file = metrics_path(run_dir);
  const bool have_metrics = fs::exists(metrics_file);
  const std::map<std::string, MetricSeries> m =
      have_metrics ? read_metrics(metrics_file) : std::map<std::string, MetricSeries>{};
  const std::vector<json> records =
      have_metrics ? metric_records(metrics_file) : std::vector<json>{};
  std::string name = fs::path(run_dir).filename().string();
  double floor = NAN;
  if (const std::string path = run_dir + "/config.toml"; fs::exists(path)) {
    const RunConfig c = parse_run_config(read_file(path), path);
    name = c.run.name, floor = data_loss_floor(c);
  }
  Page page;
  auto line = [&](const std::string& id, const std::string& title, LinePlot p,
                  const std::string& why) {
    p.title = title;
    if (p.series.empty()) return page.missing(id, title, why);
    page.plot(id, title, render_line_plot(p));
  };
  const std::string no_metrics = have_metrics ? "no such metric" : "no metrics.jsonl";
  line("loss", "Loss", loss_plot(m, floor, ""), no_metrics);
  line("lr", "Learning rate", series_plot(m, {{"lr", "learning rate"}}, "learning rate"),
       no_metrics);
  line("grad_norm", "Gradient norm",
       series_plot(m, {{"grad_norm", "global gradient norm"}}, "norm", 1, true), no_metrics);
  line("throughput", "Throughput",
       series_plot(m, {{"tokens_per_second", "tokens/s"}}, "tokens per second"), no_metrics);
  line("mfu", "Model FLOPs utilization",
       series_plot(m, {{"mfu", "MFU (of the measured FMA peak)"}}, "MFU (%)", 100), no_metrics);

  if (fs::exists(expert_load_path(run_dir))) {
    Heatmap h = maxvio_heatmap(read_expert_load(expert_load_path(run_dir)));
    page.plot("expert_load", "Expert load (maxvio per MoE layer)", render_heatmap(h));
  } else {
    page.missing("expert_load", "Expert load", "no expert_load.jsonl (a model without MoE layers)");
  }

  std::vector<std::pair<std::string, std::string>> groups;
  for (const auto& [key, series] : m)
    if (key.rfind("comm.", 0) == 0 && key.size() > 11 && key.substr(key.size() - 6) == ".bytes" &&
        key.find('.', 5) == key.size() - 6 && key != "comm.world.bytes")
      groups.push_back({key, key.substr(5, key.size() - 11)});
  line("comm_groups", "Communication by process group (rank 0, payload bytes per step)",
       series_plot(m, groups, "bytes per step"), "a one-process run: no process groups");
  const Heatmap ranks_comm =
      per_rank_heatmap(records, "comm.bytes.ranks", "", "payload bytes per step");
  if (ranks_comm.values.empty())
    page.missing("comm_ranks", "Communication by rank", "a one-process run");
  else
    page.plot("comm_ranks", "Communication by rank (payload bytes per step)",
              render_heatmap(ranks_comm));

  if (const std::string svg = run_dir + "/pipeline_timeline.svg"; fs::exists(svg))
    page.plot("pipeline", "Pipeline timeline (planned and measured step)", read_file(svg));
  else
    page.missing("pipeline", "Pipeline timeline", "no pipeline parallelism");

  const Heatmap acts =
      per_rank_heatmap(records, "activation.peak_bytes.ranks", "", "activation peak (bytes)");
  if (!acts.values.empty()) {
    page.plot("activations", "Activation memory by rank (measured peak per step)",
              render_heatmap(acts));
  } else {
    line("activations", "Activation memory (measured peak and estimate)",
         series_plot(m,
                     {{"activation.peak_bytes", "measured peak"},
                      {"memory.estimated_activation_bytes", "estimate"}},
                     "bytes"),
         no_metrics);
  }

  RunReport& report = page.report();
  report.html_path = run_dir + "/report.html";
  write_file_atomic(report.html_path, page.html("k3lab run: " + name));
  report.trace_path = run_dir + "/trace.json";
  write_file_atomic(report.trace_path,
                    chrome_trace(records, run_dir + "/pipeline_trace.json").dump());
  return report;
}

}  // namespace k3::train
