// `k3lab eval --checkpoint PATH [--batches N] [--data TEXT] [--json]`: validation loss and
// perplexity of a checkpoint, on its run's data or on the validation share of another text
// (a file or directory, as data.source reads it: out-of-distribution scoring in sweeps);
// `k3lab eval longctx ...` (eval_longctx.cpp): its accuracy on long-context tasks.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "k3/apps/commands.h"
#include "k3/apps/forward_layout.h"
#include "k3/base/error.h"
#include "k3/train/eval/evaluate.h"

namespace k3::apps {

void add_eval(CLI::App& app) {
  struct Args {
    std::string checkpoint;
    int64_t batches = 0;
    int64_t tp = 0;
    std::string data;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("eval", "Validation loss of a checkpoint on its run's data");
  // Required unless a subcommand runs instead, which has its own.
  cmd->add_option("--checkpoint", a->checkpoint, "A run directory or a checkpoint directory");
  cmd->add_option("--batches", a->batches, "Validation batches to use (0: all)");
  cmd->add_option("--data", a->data,
                  "Score the validation share of this text file or directory instead (read as "
                  "data.source reads one, with the run's tokenizer and data.val_fraction)");
  cmd->add_flag("--json", a->json, "Print one JSON object: loss, perplexity, tokens");
  add_tp_option(cmd, a->tp);
  add_eval_longctx(*cmd);
  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;  // `eval longctx` ran instead
    if (a->checkpoint.empty()) throw CLI::RequiredError("--checkpoint");
    const dist::Comm world = dist::Comm::world();
    const dist::ProcessGrid grid(forward_dims(a->tp, world.size()), world);
    auto s = train::open_checkpoint_session(a->checkpoint, grid);
    train::RunConfig data_config = s->config;
    if (!a->data.empty()) {
      K3_CHECK_CTX(std::filesystem::exists(a->data), (ErrorContext{a->data, "--data", -1}),
                   "no such file or directory");
      data_config.data.source = std::filesystem::absolute(a->data).string();
      data_config.data.path.clear();
      s->loss_floor = NAN;  // the floor is the built-in corpus's
    }
    data::TokenDataset ds = train::load_run_dataset(data_config, *s->tokenizer);
    train::EvalResult e = train::evaluate_run(*s, ds, a->batches);
    if (world.rank() != 0) return;
    if (a->json) {
      nlohmann::json j{{"loss", e.loss}, {"perplexity", e.perplexity}, {"tokens", e.tokens}};
      if (std::isfinite(s->loss_floor)) j["entropy_floor"] = s->loss_floor;
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("validation loss %.4f nats/token, perplexity %.3f over %lld tokens", e.loss,
                e.perplexity, static_cast<long long>(e.tokens));
    if (std::isfinite(s->loss_floor))
      std::printf(" (entropy floor %.4f, gap %.4f)", s->loss_floor, e.loss - s->loss_floor);
    std::printf("\n");
  });
}

}  // namespace k3::apps
