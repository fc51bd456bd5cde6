// `k3lab sample --checkpoint PATH --prompt TEXT`: generate text with a KV cache.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/apps/forward_layout.h"
#include "k3/base/log.h"
#include "k3/train/eval/evaluate.h"

namespace k3::apps {

void add_sample(CLI::App& app) {
  struct Args {
    std::string checkpoint, prompt, precision;
    int64_t max_tokens = 200, top_k = 40;
    double temperature = 0.8, top_p = 0.95;
    uint64_t seed = 1;
    bool truncate_prompt = false, timing = false;
    int64_t tp = 0;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  cmd->add_option("--checkpoint", a->checkpoint, "A run directory or a checkpoint directory")
      ->required();
  cmd->add_option("--prompt", a->prompt, "Text to continue");
  // The ranges are checked by check_sampling_params and prompt_room, which also refuse NaN and inf.
  cmd->add_option("--max-tokens", a->max_tokens,
                  "Tokens to generate (at least 1; with the prompt, at most the model's context)");
  cmd->add_option("--temperature", a->temperature, "Finite, >= 0; 0 for greedy decoding");
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0: all)");
  cmd->add_option("--top-p", a->top_p,
                  "In (0, 1]: keep the smallest set reaching this probability");
  cmd->add_option("--seed", a->seed, "Seed of the sampling draws");
  cmd->add_flag(
      "--truncate-prompt", a->truncate_prompt,
      "Keep the last prompt tokens that fit the model's context (max_position_embeddings) "
      "with --max-tokens new ones; without it such a prompt is refused");
  cmd->add_flag("--timing", a->timing,
                "Also print on stderr the prefill's and the decode steps' tokens per second");
  add_tp_option(cmd, a->tp);
  add_precision_option(cmd, a->precision);
  cmd->callback([a] {
    const model::SamplingParams p{a->temperature, a->top_k, a->top_p, a->seed};
    model::check_sampling_params(p);  // before the checkpoint loads
    // Every rank of a tensor-parallel group draws the same tokens (the same logits and seeds).
    const dist::Comm world = dist::Comm::world();
    const dist::ProcessGrid grid(forward_dims(a->tp, world.size()), world);
    auto s = train::open_checkpoint_session(a->checkpoint, grid);
    apply_precision(*s->model, a->precision);
    train::Sample out;
    try {
      out = train::sample_text(*s, a->prompt, a->max_tokens, p, a->truncate_prompt);
    } catch (const Error& e) {
      if (e.context().field != "prompt") throw;
      throw Error(e.message() + " (--truncate-prompt keeps the last ones)", e.context());
    }
    if (world.rank() != 0) return;
    if (out.dropped_tokens > 0)
      log_warn("sample: the prompt of ", out.prompt_tokens, " tokens was truncated to its last ",
               out.prompt_tokens - out.dropped_tokens, " to fit the model's context");
    std::printf("%s\n", out.text.c_str());
    if (a->timing) {
      const model::GenerationTimes& t = out.times;
      std::fprintf(stderr,
                   "prefill: %ld tokens in %.3f s, %.1f tokens/s; decode: %ld tokens in %.3f s, "
                   "%.1f tokens/s\n",
                   static_cast<long>(t.prefill_tokens), t.prefill_seconds,
                   t.prefill_tokens_per_second(), static_cast<long>(t.decode_tokens),
                   t.decode_seconds, t.decode_tokens_per_second());
    }
  });
}

}  // namespace k3::apps
