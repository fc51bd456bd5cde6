// Each subcommand lives in its own file and registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace k3::apps {

void add_selfcheck(CLI::App& app);
void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_sample(CLI::App& app);
void add_schedule(CLI::App& app);
void add_op(CLI::App& app);
void add_model(CLI::App& app);
void add_report(CLI::App& app);
void add_plot(CLI::App& app);
void add_export(CLI::App& app);
void add_config(CLI::App& app);

}  // namespace k3::apps
