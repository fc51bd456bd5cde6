// k3lab: train and inspect Kimi-K3-style models.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <ostream>
#include <string_view>

#include "k3/apps/commands.h"
#include "k3/base/error.h"
#include "k3/base/log.h"
#include "k3/base/stop_signals.h"
#include "k3/base/threads.h"
#include "k3/dist/runtime.h"

// Decoding runs hundreds of small parallel regions per token: batch-1 decoding measured 10-30x
// slower with spinning OpenMP threads on a loaded 2-core host (k3lab bench decode, L6 d384: 4-7
// against 128-150 tokens/s), so the decoding commands wait passively.
static void wait_passively_when_decoding(char** argv) {
  if (!argv[1]) return;
  const std::string_view command = argv[1];
  if (command == "sample" || command == "bench") k3::restart_with_passive_omp_wait(argv);
}

int main(int argc, char** argv) {
  wait_passively_when_decoding(argv);
  k3::route_stop_signals();  // before any thread starts (MPI's, OpenMP's)
  // Under mpirun or srun every rank runs this; without a launcher it is a world of one.
  k3::dist::Runtime mpi(&argc, &argv);
  k3::set_log_tag(k3::dist::rank_tag());
  k3::share_cores(k3::dist::Runtime::ranks_on_this_machine());
  k3::set_num_threads();
  CLI::App app{"k3lab: train, inspect and plan Kimi-K3-style language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "k3lab 0.1");
  k3::apps::add_train(app);
  k3::apps::add_eval(app);
  k3::apps::add_sample(app);
  k3::apps::add_bench(app);
  k3::apps::add_schedule(app);
  k3::apps::add_op(app);
  k3::apps::add_model(app);
  k3::apps::add_report(app);
  k3::apps::add_plot(app);
  k3::apps::add_export(app);
  k3::apps::add_config(app);
  k3::apps::add_tokenizer(app);
  k3::apps::add_data(app);
  k3::apps::add_fit(app);
  k3::apps::add_sweep(app);
  k3::apps::add_sandbox(app);
  k3::apps::add_plan(app);
  k3::apps::add_selfcheck(app);
  // Subcommands run from their callbacks inside parse(): one clear line for any error, no stack
  // dump.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same command line: the first says what is wrong with it (or --help).
    std::ostream discard(nullptr);
    if (k3::dist::Runtime::world_rank() == 0) return app.exit(e);
    return app.exit(e, discard, discard);
  } catch (const std::exception& e) {
    // One line, once; in a multi-rank job it ends every rank, never leaving one waiting in a
    // collective.
    k3::dist::fail(e.what());
  }
  return 0;
}
