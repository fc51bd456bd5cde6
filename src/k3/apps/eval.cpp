// `k3lab eval --checkpoint PATH [--batches N]`: validation loss and perplexity of a checkpoint;
// `k3lab eval longctx ...` (eval_longctx.cpp): its accuracy on long-context tasks.
#include <cmath>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/train/evaluate.h"

namespace k3::apps {

void add_eval(CLI::App& app) {
  struct Args {
    std::string checkpoint;
    int64_t batches = 0;
    int64_t tp = 0;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("eval", "Validation loss of a checkpoint on its run's data");
  // Required unless a subcommand runs instead, which has its own.
  cmd->add_option("--checkpoint", a->checkpoint, "A run directory or a checkpoint directory");
  cmd->add_option("--batches", a->batches, "Validation batches to use (0: all)");
  add_tp_option(cmd, a->tp);
  add_eval_longctx(*cmd);
  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;  // `eval longctx` ran instead
    if (a->checkpoint.empty()) throw CLI::RequiredError("--checkpoint");
    const dist::Comm world = dist::Comm::world();
    const dist::ProcessGrid grid(forward_dims(a->tp, world.size()), world);
    auto s = train::open_checkpoint_session(a->checkpoint, grid);
    data::TokenDataset ds = train::load_run_dataset(s->config, *s->tokenizer);
    train::EvalResult e = train::evaluate_run(*s, ds, a->batches);
    if (world.rank() != 0) return;
    std::printf("validation loss %.4f nats/token, perplexity %.3f over %lld tokens", e.loss,
                e.perplexity, static_cast<long long>(e.tokens));
    if (std::isfinite(s->loss_floor))
      std::printf(" (entropy floor %.4f, gap %.4f)", s->loss_floor, e.loss - s->loss_floor);
    std::printf("\n");
  });
}

}  // namespace k3::apps
