// `k3lab report RUN_DIR [--layer N]...`: one page for a run, RUN_DIR/report.html (loss, learning
// rate, gradient norm, throughput, MFU, expert load, communication, pipeline timeline, activation
// memory; train/observe/run_report.h) with RUN_DIR/trace.json, its step timelines for Perfetto.
// With an expert_load.jsonl it also draws RUN_DIR/expert_load.svg (maxvio of every MoE layer over
// the steps) and, per --layer, RUN_DIR/expert_load_layer<N>.svg (each expert's load / mean load
// over the steps), and under expert parallelism prints each ep rank's rows before and after
// MoonEP's balancing.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <utility>
#include <vector>

#include "k3/apps/commands.h"
#include "k3/base/error.h"
#include "k3/train/observe/expert_load.h"
#include "k3/train/observe/metrics.h"
#include "k3/train/observe/run_report.h"

namespace k3::apps {

void add_report(CLI::App& app) {
  struct Args {
    std::string run_dir;
    std::vector<int64_t> layers;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "report", "One HTML page of a run's plots, its Chrome trace, and its expert-load plots");
  cmd->add_option("run_dir", a->run_dir, "The run directory")->required();
  cmd->add_option("--layer", a->layers, "Also plot each expert of this MoE layer (repeatable)");
  cmd->callback([a] {
    const std::string loads = train::expert_load_path(a->run_dir);
    const bool have_loads = std::filesystem::exists(loads);
    K3_CHECK_CTX(
        have_loads ||
            (a->layers.empty() && std::filesystem::exists(train::metrics_path(a->run_dir))),
        (ErrorContext{loads, "", -1}),
        a->layers.empty() ? "neither this file nor metrics.jsonl exists: not a run directory"
                          : "no such file: --layer needs a run with MoE layers");
    const train::RunReport page = train::write_run_report(a->run_dir);
    std::string missing;
    for (const std::string& why : page.missing) missing += "; not drawn: " + why;
    std::printf("%s (%zu plots%s)\n%s\n", page.html_path.c_str(), page.plots.size(),
                missing.c_str(), page.trace_path.c_str());
    if (!have_loads) return;
    const auto records = train::read_expert_load(loads);
    K3_CHECK_CTX(!records.empty(), (ErrorContext{train::expert_load_path(a->run_dir), "", -1}),
                 "no expert-load records in the file");
    // Every plot is made before any is written: a bad --layer leaves no partial report.
    const auto dir = std::filesystem::path(a->run_dir);
    std::vector<std::pair<std::string, Heatmap>> plots;
    plots.emplace_back((dir / "expert_load.svg").string(), train::maxvio_heatmap(records));
    for (int64_t layer : a->layers)
      plots.emplace_back((dir / ("expert_load_layer" + std::to_string(layer) + ".svg")).string(),
                         train::layer_load_heatmap(records, layer));
    for (const auto& [path, map] : plots) {
      write_svg(path, render_heatmap(map));
      std::printf("%s\n", path.c_str());
    }
    const train::ExpertLoadRecord& last = records.back();
    std::printf("expert load at step %lld:\n  layer  maxvio  min load  max load  idle\n",
                static_cast<long long>(last.step));
    for (const auto& [layer, st] : last.layers)
      std::printf("  %5lld  %6.3f  %8lld  %8lld  %4lld\n", static_cast<long long>(layer), st.maxvio,
                  static_cast<long long>(st.min_load), static_cast<long long>(st.max_load),
                  static_cast<long long>(st.idle));
    if (last.dispatch.empty()) return;
    // Before: the rows of each rank's home experts (all sent home, as without MoonEP); after:
    // the rows it computed (the same under the plain all-to-all dispatch).
    std::printf(
        "rows per expert-parallel rank at step %lld (before = routed to its home experts, "
        "after = computed):\n  layer  rank    before     after\n",
        static_cast<long long>(last.step));
    for (const auto& [layer, d] : last.dispatch) {
      for (size_t r = 0; r < d.rows.size(); ++r)
        std::printf("  %5lld  %4zu  %8lld  %8lld\n", static_cast<long long>(layer), r,
                    static_cast<long long>(d.home_rows[r]), static_cast<long long>(d.rows[r]));
      std::printf("  %5lld  replicas %lld, overflow %lld, %.2f MiB sent over ep\n",
                  static_cast<long long>(layer), static_cast<long long>(d.replicas),
                  static_cast<long long>(d.overflow), static_cast<double>(d.bytes) / (1 << 20));
    }
  });
}

}  // namespace k3::apps
