// `k3lab eval longctx --checkpoint DIR --tasks DIR [--out FILE.svg] [--depth-bins N]`: a
// checkpoint's accuracy on long-context tasks (train/eval/longctx_eval.h) by length and answer
// depth, as a table and a heatmap; beside it, the oracle's accuracy on the same documents, which
// reads their text without a model and must answer every task.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/data/longctx/oracle.h"
#include "k3/data/longctx/task_store.h"
#include "k3/dist/runtime.h"
#include "k3/train/eval/longctx_eval.h"
#include "k3/train/observe/progress.h"

namespace k3::apps {

void add_eval_longctx(CLI::App& eval) {
  struct Args {
    std::string checkpoint, tasks, out = "longctx.svg";
    int depth_bins = 5;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = eval.add_subcommand("longctx", "Accuracy on long-context tasks by length and depth");
  cmd->add_option("--checkpoint", a->checkpoint, "A run directory or a checkpoint directory")
      ->required();
  cmd->add_option("--tasks", a->tasks, "A directory written by `k3lab data longctx`")->required();
  cmd->add_option("--out", a->out, "The heatmap (SVG)")->capture_default_str();
  cmd->add_option("--depth-bins", a->depth_bins, "Equal bins of the answer depth over [0, 1]")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  cmd->callback([a] {
    if (dist::Runtime::world_rank() != 0) return;
    auto s = train::open_checkpoint_session(a->checkpoint);
    const std::vector<data::LongTask> tasks = data::read_long_tasks(a->tasks, *s->tokenizer);
    const int64_t context = s->model->config().max_position_embeddings;
    std::vector<train::LongTaskOutcome> model, oracle;
    int64_t skipped = 0;
    // A long task takes seconds: the training progress line (a "step" is a task) on stderr.
    train::ProgressDisplay progress(stderr);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const data::LongTask& t = tasks[i];
      progress.update(
          {.step = static_cast<int64_t>(i), .total_steps = static_cast<int64_t>(tasks.size())});
      if (t.length() > context) {
        ++skipped;
        continue;
      }
      const std::vector<int32_t> predicted = train::greedy_answer_tokens(*s, t);
      model.push_back({t.length(), t.depth, train::predicts_answer(t, predicted), t.kind,
                       train::answer_tokens_right(t, predicted), t.answer_length});
      const auto before_answer = std::span(t.tokens).first(static_cast<size_t>(t.answer_offset));
      oracle.push_back({t.length(), t.depth,
                        data::solve_long_task(s->tokenizer->decode(before_answer)) == t.answer});
    }
    progress.update({.step = static_cast<int64_t>(tasks.size()),
                     .total_steps = static_cast<int64_t>(tasks.size())});
    progress.finish();
    std::printf("%zu tasks of %s", model.size(), a->tasks.c_str());
    if (skipped > 0)
      std::printf(" (%lld longer than the model's context of %lld tokens skipped)",
                  static_cast<long long>(skipped), static_cast<long long>(context));
    std::printf("\nmodel (greedy on every answer token):\n");
    const train::AccuracyGrid grid = train::accuracy_grid(model, a->depth_bins);
    std::fputs(train::accuracy_table(grid).c_str(), stdout);
    std::printf("model, answer tokens right (each predicted after the true ones before it):\n");
    std::fputs(train::token_accuracy_table(model).c_str(), stdout);
    std::printf("oracle (reads the text, no model):\n");
    std::fputs(train::accuracy_table(train::accuracy_grid(oracle, a->depth_bins)).c_str(), stdout);
    write_svg(a->out, render_heatmap(train::accuracy_heatmap(
                          grid, "long-context accuracy: " + a->checkpoint)));
    std::printf("heatmap: %s\n", a->out.c_str());
  });
}

}  // namespace k3::apps
