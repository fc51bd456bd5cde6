// Each subcommand lives in its own file and registers itself on the CLI11 app.
#pragma once

// Declarations only: each subcommand's file includes <CLI/CLI.hpp> and the k3 headers it uses
// itself (once this header pulled CLI11, the model and the process grid into every one of them);
// the options shared by the forward-only commands are in forward_layout.h.
namespace CLI {
class App;
}

namespace k3::apps {

void add_selfcheck(CLI::App& app);
void add_train(CLI::App& app);
void add_eval(CLI::App& app);
void add_eval_longctx(CLI::App& eval);  // `eval longctx`
void add_sample(CLI::App& app);
void add_bench(CLI::App& app);  // `bench decode`
void add_schedule(CLI::App& app);
void add_pipeline_schedule(CLI::App& schedule);  // `schedule pipeline`
void add_op(CLI::App& app);
void add_model(CLI::App& app);
void add_report(CLI::App& app);
void add_plot(CLI::App& app);
void add_export(CLI::App& app);
void add_config(CLI::App& app);
void add_tokenizer(CLI::App& app);
void add_data(CLI::App& app);  // `data prepare`
void add_data_longctx(CLI::App& data);  // `data longctx`
void add_fit(CLI::App& app);  // scaling-law fit
void add_sweep(CLI::App& app);  // scaling sweeps
void add_sandbox(CLI::App& app);  // agent sandboxes
void add_plan(CLI::App& app);  // the planner

}  // namespace k3::apps
