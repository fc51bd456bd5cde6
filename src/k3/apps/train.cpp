// `k3lab train --config run.toml [--set key=value ...]` starts a run;
// `k3lab train --resume [RUN_DIR] [--set key=value ...] [--allow-change KEY ...]` continues one.
#include <CLI/CLI.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/base/error.h"
#include "k3/base/profile.h"
#include "k3/base/stop_signals.h"
#include "k3/dist/runtime.h"
#include "k3/train/loop/trainer.h"
#include "k3/train/preflight/preflight.h"

namespace k3::apps {

// The buckets as a tree: "step" holds the components timed within it (the mixers, the MoE layers,
// the LM head, their GEMMs within them), each bucket's "other" the time outside its children.
static void print_profile() {
  const ProfileNode root = Profile::tree();
  std::printf("\nprofile (wall seconds over the run; %% of the time profiled):\n%s",
              format_profile(root, root.seconds).c_str());
}

static void print_summary(const train::TrainSummary& r) {
  if (r.finished_before) {
    std::printf(
        "%s finished at step %lld (train.steps): nothing to do; raise it to continue, "
        "e.g. --set train.steps=%lld\ncheckpoint:    %s\n",
        r.run_dir.c_str(), static_cast<long long>(r.steps), static_cast<long long>(2 * r.steps),
        r.last_checkpoint.c_str());
    return;
  }
  std::printf("\n%s %lld steps: train loss %.4f", r.stop_signal ? "stopped after" : "trained",
              static_cast<long long>(r.steps), r.train_loss);
  if (std::isfinite(r.validation_loss)) std::printf(", validation loss %.4f", r.validation_loss);
  if (std::isfinite(r.loss_floor) && std::isfinite(r.validation_loss))
    std::printf(" (entropy floor %.4f, gap %.4f)", r.loss_floor, r.validation_loss - r.loss_floor);
  std::printf("\n");
  if (!r.sample.empty()) std::printf("\nsample:\n%s\n\n", r.sample.c_str());
  std::printf("run directory: %s\n", r.run_dir.c_str());
  std::printf("loss plot:     %s\n", r.loss_plot.c_str());
  std::printf("metrics:       %s/metrics.jsonl\n", r.run_dir.c_str());
  if (!r.last_checkpoint.empty()) std::printf("checkpoint:    %s\n", r.last_checkpoint.c_str());
  if (r.stop_signal)
    std::printf("stopped by %s: continue with k3lab train --resume %s\n",
                signal_name(r.stop_signal), r.run_dir.c_str());
}

void add_train(CLI::App& app) {
  struct Args {
    std::string config, resume_dir;
    std::vector<std::string> overrides, allowed;
    bool quiet = false, profile = false, dry_run = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML run configuration");
  cmd->add_option("--config", a->config, "Run configuration (TOML); defaults apply when omitted");
  cmd->add_option("--set", a->overrides, "Override a field: section.key=value (repeatable)");
  cmd->add_option("--resume", a->resume_dir,
                  "Continue a run from its newest usable checkpoint, with the configuration "
                  "saved in it: RUN_DIR, or run.dir of --config/--set when omitted")
      ->expected(0, 1);
  cmd->add_option("--allow-change", a->allowed,
                  "With --resume: accept a change of this key (model.config, data.seq_len, "
                  "train.batch_size, ...; 'data' for changed data) (repeatable)");
  cmd->add_flag("--quiet", a->quiet, "No progress line");
  cmd->add_flag("--profile", a->profile, "Print where training time goes, per component");
  cmd->add_flag("--dry-run", a->dry_run,
                "Run the pre-flight checks of a new run, print the memory estimate, train nothing");
  cmd->callback([a, cmd] {
    std::signal(SIGPIPE, SIG_IGN);  // a closed stdout (k3lab train | head) must not end training
    const bool resume = cmd->count("--resume") > 0;
    if (a->dry_run) {
      K3_CHECK_CTX(!resume, (ErrorContext{"", "--dry-run", -1}),
                   "checks a new run; not with --resume");
      std::printf("%s", train::dry_run(train::load_run_config(a->config, a->overrides)).c_str());
      return;
    }
    Profile::enable(a->profile);
    K3_CHECK_CTX(resume || a->allowed.empty(), (ErrorContext{"", "--allow-change", -1}),
                 "only meaningful with --resume");
    train::TrainSummary r;
    if (resume) {
      std::string dir = a->resume_dir;
      if (dir.empty()) dir = train::load_run_config(a->config, a->overrides).run.dir;
      r = train::resume({dir, a->config, a->overrides, a->allowed}, {a->quiet});
    } else {
      r = train::train(train::load_run_config(a->config, a->overrides), {a->quiet});
    }
    if (dist::Runtime::world_rank() == 0) {  // one summary for the job, from the lead
      print_summary(r);
      if (a->profile && !r.finished_before) {
        print_profile();
        std::printf("%s", r.activation_report.c_str());
      }
    }
    std::fflush(stdout);
    if (r.stop_signal) throw CLI::RuntimeError(train::kStoppedExitStatus);
  });
}

}  // namespace k3::apps
