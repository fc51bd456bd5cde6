// `k3lab data longctx --base SHARDS --lengths 1K,4K,16K --out DIR [--per-length N] [--seed S]
// [--tokenizer SPEC]`:
// long-context task documents (data/longctx/task.h) made from the base shards' documents and
// written as a shard directory with its tasks.jsonl (data/longctx/task_store.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/data/longctx/task_store.h"
#include "k3/data/tokenizer.h"
#include "k3/dist/runtime.h"

namespace k3::apps {

void add_data_longctx(CLI::App& data) {
  struct Args {
    std::string base, lengths, out, tokenizer = "byte";
    int64_t per_length = 30;
    uint64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = data.add_subcommand(
      "longctx", "Long-context tasks (multi-key retrieval, variable tracking, aggregation)");
  cmd->add_option("--base", a->base, "A shard directory whose documents surround the pieces")
      ->required();
  cmd->add_option("--lengths", a->lengths, "Document lengths in tokens, e.g. 1K,4K,16K")
      ->required();
  cmd->add_option("--out", a->out, "The shard directory to create (with its tasks.jsonl)")
      ->required();
  cmd->add_option("--per-length", a->per_length, "Tasks of each length (kinds in turn)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of every random choice")->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "The base shards' tokenizer (\"byte\" or a tokenizer directory)")
      ->capture_default_str();
  cmd->callback([a] {
    if (dist::Runtime::world_rank() != 0) return;
    const std::vector<int64_t> lengths = data::parse_context_lengths(a->lengths);
    const auto tokenizer = data::make_tokenizer(a->tokenizer);
    const data::BaseDocuments base = data::BaseDocuments::from_shards(a->base, *tokenizer);
    const std::vector<data::LongTask> tasks =
        data::synthesize_long_tasks(base, *tokenizer, lengths, a->per_length, a->seed);
    data::write_long_tasks(a->out, tasks, *tokenizer,
                           {{"longctx",
                             {{"base", a->base},
                              {"lengths", lengths},
                              {"per_length", a->per_length},
                              {"seed", a->seed}}}});
    std::printf("%zu tasks from %lld base documents in %s\n", tasks.size(),
                static_cast<long long>(base.size()), a->out.c_str());
    for (size_t l = 0; l < lengths.size(); ++l) {
      const auto first = tasks.begin() + static_cast<int64_t>(l) * a->per_length;
      const auto [lo, hi] = std::minmax_element(
          first, first + a->per_length,
          [](const data::LongTask& x, const data::LongTask& y) { return x.depth < y.depth; });
      std::printf("  %-6s %lld tasks, answer depths %.2f to %.2f\n",
                  data::context_length_label(lengths[l]).c_str(),
                  static_cast<long long>(a->per_length), lo->depth, hi->depth);
    }
  });
}

}  // namespace k3::apps
