// `k3lab sample --checkpoint PATH --prompt TEXT`: generate text with a KV cache.
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/train/evaluate.h"

namespace k3::apps {

void add_sample(CLI::App& app) {
  struct Args {
    std::string checkpoint, prompt;
    int64_t max_tokens = 200, top_k = 40;
    double temperature = 0.8, top_p = 0.95;
    uint64_t seed = 1;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  cmd->add_option("--checkpoint", a->checkpoint, "A run directory or a checkpoint directory")->required();
  cmd->add_option("--prompt", a->prompt, "Text to continue");
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", a->temperature, "0 for greedy decoding")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", a->top_p, "Keep the smallest set reaching this probability")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a->seed, "Seed of the sampling draws");
  cmd->callback([a] {
    auto s = train::open_checkpoint_session(a->checkpoint);
    std::printf("%s\n", train::sample_text(*s, a->prompt, a->max_tokens, a->temperature, a->top_k,
                                           a->top_p, a->seed).c_str());
  });
}

}  // namespace k3::apps
