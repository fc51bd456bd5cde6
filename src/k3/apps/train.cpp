// `k3lab train --config run.toml [--set key=value ...] [--resume]`
#include <cmath>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/base/profile.h"
#include "k3/train/preflight.h"
#include "k3/train/trainer.h"

namespace k3::apps {

// Components inside "step" are timed within it; "step" minus their sum is embeddings, norms,
// residual adds and the stack's own bookkeeping.
static void print_profile() {
  const auto totals = Profile::totals();
  double step = 0, optimizer = 0, inside = 0;
  for (auto& [name, secs] : totals)
    (name == train::kStepBucket ? step : name == train::kOptimizerBucket ? optimizer : inside) += secs;
  const double whole = step + optimizer;
  std::printf("\nprofile (wall seconds over the run; %% of forward + backward + optimizer):\n");
  for (auto& [name, secs] : totals)
    std::printf("  %-36s %9.3f s %6.1f%%\n", name.c_str(), secs, 100 * secs / whole);
  std::printf("  %-36s %9.3f s %6.1f%%\n", "other (embedding, norms, residuals)", step - inside,
              100 * (step - inside) / whole);
}

void add_train(CLI::App& app) {
  struct Args {
    std::string config;
    std::vector<std::string> overrides;
    bool resume = false, quiet = false, profile = false, dry_run = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML run configuration");
  cmd->add_option("--config", a->config, "Run configuration (TOML); defaults apply when omitted");
  cmd->add_option("--set", a->overrides, "Override a field: section.key=value (repeatable)");
  cmd->add_flag("--resume", a->resume, "Continue the run directory's latest checkpoint");
  cmd->add_flag("--quiet", a->quiet, "No progress line");
  cmd->add_flag("--profile", a->profile, "Print where training time goes, per component");
  cmd->add_flag("--dry-run", a->dry_run,
                "Run the pre-flight checks, print the memory estimate, train nothing");
  cmd->callback([a] {
    train::RunConfig config = train::load_run_config(a->config, a->overrides);
    if (a->dry_run) {
      std::printf("%s", train::dry_run(config).c_str());
      return;
    }
    Profile::enable(a->profile);
    train::TrainSummary r = train::train(config, {a->resume, a->quiet});
    std::printf("\ntrained %lld steps: train loss %.4f", static_cast<long long>(r.steps), r.train_loss);
    if (std::isfinite(r.validation_loss)) std::printf(", validation loss %.4f", r.validation_loss);
    if (std::isfinite(r.loss_floor) && std::isfinite(r.validation_loss))
      std::printf(" (entropy floor %.4f, gap %.4f)", r.loss_floor, r.validation_loss - r.loss_floor);
    std::printf("\n");
    if (!r.sample.empty()) std::printf("\nsample:\n%s\n\n", r.sample.c_str());
    std::printf("run directory: %s\n", r.run_dir.c_str());
    std::printf("loss plot:     %s\n", r.loss_plot.c_str());
    std::printf("metrics:       %s/metrics.jsonl\n", r.run_dir.c_str());
    if (!r.last_checkpoint.empty()) std::printf("checkpoint:    %s\n", r.last_checkpoint.c_str());
    if (a->profile) print_profile();
  });
}

}  // namespace k3::apps
