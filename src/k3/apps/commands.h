// Each subcommand lives in its own file and registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

#include "k3/dist/grid.h"
#include "k3/model/model.h"

namespace k3::apps {

// The layout of a command that only runs the model forward (eval, sample) under a launcher:
// --tp ranks split the model (0: every rank of the job), and the job's other ranks form dp copies
// of it. Refuses a --tp that does not divide the job, in one line.
void add_tp_option(CLI::App* cmd, int64_t& tp);
dist::ParallelDims forward_dims(int64_t tp, int world_size);
// The --precision option of the same commands: the matrix products' precision, fp32 or bf16
// (empty: the checkpoint's train.precision, fp32 for a bare model), applied to MODEL.
void add_precision_option(CLI::App* cmd, std::string& precision);
void apply_precision(model::Model& model, const std::string& precision);

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
