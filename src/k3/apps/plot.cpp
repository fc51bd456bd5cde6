// `k3lab plot RUN_DIR`: redraws RUN_DIR/loss.svg from metrics.jsonl, at any time (while the run
// trains, after it stopped, or after it crashed).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/base/fs.h"
#include "k3/train/observe/loss_plot.h"

namespace k3::apps {

void add_plot(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("plot", "Redraw a run's loss plot (RUN_DIR/loss.svg)");
  cmd->add_option("run_dir", *run_dir, "The run directory")->required();
  cmd->callback([run_dir] {
    const std::string config_path = *run_dir + "/config.toml";
    train::RunConfig config = train::parse_run_config(read_file(config_path), config_path);
    std::printf("%s\n", train::write_loss_plot(*run_dir, config).c_str());
  });
}

}  // namespace k3::apps
