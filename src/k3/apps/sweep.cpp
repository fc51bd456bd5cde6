// `k3lab sweep SWEEP.toml`: the jobs of a scaling sweep (src/k3/sweep/, docs/scaling.md) run as
// processes, several at once, resumable; then each arm's best learning rate per size, one law per
// arm and the compute multiplier between arms (an arm with too few sizes for a law: its effective
// compute point by point), intervals with the seeds' spread: OUT/NAME.csv, OUT/NAME.<loss>.txt,
// .json and .svg.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "k3/apps/commands.h"
#include "k3/apps/number_option.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/base/svg_plot.h"
#include "k3/scaling/fit.h"
#include "k3/sweep/compare.h"
#include "k3/sweep/probe.h"
#include "k3/sweep/runner.h"
#include "k3/train/loop/trainer.h"
#include "k3/train/observe/loss_plot.h"

namespace k3::apps {
namespace {

struct SweepArgs {
  std::string file;
  int64_t parallel = 0;
  bool list = false, no_run = false, retry_failed = false;
  int resamples = 200;
  uint64_t seed = 1;
};

void list_jobs(const std::vector<sweep::Job>& jobs, const std::vector<sweep::JobResult>& results) {
  std::printf("%-40s %6s %6s %10s %12s %8s %10s %s\n", "job", "hidden", "layers", "N", "D", "steps",
              "C (6ND)", "status");
  for (size_t i = 0; i < jobs.size(); ++i) {
    const sweep::Job& j = jobs[i];
    std::printf("%-40s %6lld %6lld %10lld %12lld %8lld %10.3g %s\n", j.id.c_str(),
                static_cast<long long>(j.shape.hidden), static_cast<long long>(j.shape.layers),
                static_cast<long long>(j.shape.params), static_cast<long long>(j.tokens),
                static_cast<long long>(j.steps), j.flops_6nd,
                results[i].ended() ? results[i].status.c_str() : "pending");
  }
}

// The comparison on one loss column, printed and written beside the results.
void compare(const sweep::SweepSpec& spec, const std::vector<sweep::Job>& jobs,
             const std::vector<sweep::JobResult>& results, const std::string& column,
             const SweepArgs& a) {
  const std::string base = spec.out + "/" + spec.name + "." + column;
  write_svg(base + ".lr.svg", sweep::render_lr_svg(jobs, results, column));
  try {
    const sweep::Comparison c = sweep::compare_arms(jobs, results, column, a.resamples, a.seed);
    const std::string text = sweep::describe(c, train::data_loss_floor(jobs.front().config));
    write_file_atomic(base + ".txt", text);
    write_file_atomic(base + ".json", sweep::comparison_json(c));
    write_svg(base + ".svg", sweep::render_comparison_svg(c));
    std::printf("\n%s%s.txt (.json, .svg, .lr.svg)\n", text.c_str(), base.c_str());
  } catch (const Error& e) {
    std::printf("\nno comparison on %s yet: %s\n", column.c_str(), e.what());
  }
}

}  // namespace

void add_sweep(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand(
      "sweep", "Run a scaling sweep's training jobs (resumable), then compare its arms");
  cmd->add_option("sweep", a->file, "The sweep file (TOML)")->required();
  add_number(cmd, "--parallel", a->parallel,
             "Jobs at once (0: sweep.parallel, or the split chosen)", Bounds<int64_t>{0, 1024});
  cmd->add_flag("--list", a->list, "Print the jobs (shapes, tokens, status) and run nothing");
  cmd->add_flag("--no-run", a->no_run, "Compare the jobs that have ended; start none");
  cmd->add_flag("--retry-failed", a->retry_failed, "Run again the jobs that failed");
  add_number(cmd, "--resamples", a->resamples,
             "Bootstrap resamples of each arm's fit, with seed noise (0: none)",
             Bounds<int>{0, scaling::kMaxResamples});
  add_number(cmd, "--seed", a->seed, "Seed of the bootstrap and its seed noise");
  cmd->callback([a] {
    const sweep::SweepSpec spec = sweep::load_sweep_spec(a->file);
    std::vector<sweep::Job> jobs = sweep::plan_jobs(spec);
    if (a->list) {
      list_jobs(jobs, sweep::read_results(spec.out, jobs));
      return;
    }
    std::filesystem::create_directories(spec.out);
    if (!a->no_run) {
      sweep::RunnerOptions o;
      o.k3lab = std::filesystem::read_symlink("/proc/self/exe").string();
      const sweep::Split split = sweep::settle_split(spec, jobs, o.k3lab);
      sweep::set_threads(jobs, split.threads);
      o.parallel = a->parallel > 0 ? a->parallel : split.jobs;
      o.retry_failed = a->retry_failed;
      const sweep::SweepProgress p = sweep::run_jobs(spec, jobs, o);
      std::printf("%s: %lld jobs done, %lld failed, %lld left; %s\n", a->file.c_str(),
                  static_cast<long long>(p.done), static_cast<long long>(p.failed),
                  static_cast<long long>(p.left), sweep::results_path(spec).c_str());
      if (p.stopped) {
        std::printf("stopped: run the same command to continue\n");
        throw CLI::RuntimeError(train::kStoppedExitStatus);
      }
    }
    const std::string out = std::filesystem::absolute(spec.out).lexically_normal().string();
    if (a->no_run) {
      // Not before the split is chosen: the files would fix the jobs' threads.
      if (const std::optional<sweep::Split> split = sweep::known_split(spec)) {
        sweep::set_threads(jobs, split->threads);
        for (const sweep::Job& j : jobs) sweep::write_job_files(j, out);
      }
    }
    const std::vector<sweep::JobResult> results = sweep::read_results(spec.out, jobs);
    compare(spec, jobs, results, "val_loss", *a);
    for (const std::string& text : spec.val_data)
      compare(spec, jobs, results, sweep::ood_column(text), *a);
  });
}

}  // namespace k3::apps
