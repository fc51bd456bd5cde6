// `k3lab bench decode --model CONFIG | --checkpoint DIR [--batch 1,8] [--prompt N] [--tokens N]`:
// prompt processing (prefill) and per-token decoding speed, measured apart, for each batch size:
// B prompts of random tokens are prefilled together, then decoded together greedily.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "k3/apps/commands.h"
#include "k3/apps/forward_layout.h"
#include "k3/base/error.h"
#include "k3/base/philox.h"
#include "k3/base/threads.h"
#include "k3/kernels/gemm.h"
#include "k3/model/model.h"
#include "k3/model/sampling.h"
#include "k3/train/session.h"

namespace k3::apps {
namespace {

struct DecodeArgs {
  std::string model, checkpoint, precision;
  std::vector<int64_t> batch = {1, 8};
  int64_t prompt = 512, tokens = 128, repeats = 3;
  uint64_t seed = 1;
  bool json = false;
};

// Median and range of repeated figures.
struct Range {
  double median, min, max;
};
Range range_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

void run_decode_bench(const DecodeArgs& a) {
  K3_CHECK_CTX(a.model.empty() != a.checkpoint.empty(), (ErrorContext{"", "model", -1}),
               "give either --model CONFIG or --checkpoint DIR");
  K3_CHECK_CTX(a.prompt >= 1, (ErrorContext{"", "prompt", -1}), "expected at least 1, got ",
               a.prompt);
  K3_CHECK_CTX(a.tokens >= 2, (ErrorContext{"", "tokens", -1}),
               "expected at least 2 (the first comes from the prefill), got ", a.tokens);
  K3_CHECK_CTX(a.repeats >= 1, (ErrorContext{"", "repeats", -1}), "expected at least 1, got ",
               a.repeats);
  for (int64_t b : a.batch)
    K3_CHECK_CTX(b >= 1, (ErrorContext{"", "batch", -1}), "batch sizes must be at least 1, got ",
                 b);
  std::unique_ptr<train::Session> session;
  std::unique_ptr<model::Model> own;
  Arena own_arena;
  model::Model* model = nullptr;
  Arena* arena = &own_arena;
  if (!a.checkpoint.empty()) {
    session = train::open_checkpoint_session(a.checkpoint);
    model = session->model.get();
    arena = &session->arena;
  } else {
    own = std::make_unique<model::Model>(model::load_model_config(a.model));
    own->initialize(a.seed);
    model = own.get();
    own_arena = train::step_arena();
  }
  apply_precision(*model, a.precision);
  const char* precision = kernels::precision_name(model->precision());
  const model::ModelConfig& c = model->config();
  // The weights a batch-1 step reads (fp32, or their bf16 copy): every matrix but the embedding
  // table, routed experts counted for the k a token visits. Over the memory bandwidth, the floor
  // of its time.
  const double bytes = model->precision() == kernels::Precision::BF16 ? 2.0 : 4.0;
  const double weight_mb = bytes * static_cast<double>(model->matmul_params()) / 1e6;
  model::check_prompt_fits(a.prompt, a.tokens, c.max_position_embeddings);

  nlohmann::json rows = nlohmann::json::array();
  if (!a.json)
    std::printf("%-8s %28s %28s %12s\n", "batch", "prefill tok/s", "decode tok/s", "ms/step");
  for (int64_t B : a.batch) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < a.prompt; ++t)
        prompts[static_cast<size_t>(b)].push_back(
            static_cast<int32_t>(philox_uniform(a.seed, stream_of("bench prompt"),
                                                static_cast<uint64_t>(b * a.prompt + t)) *
                                 static_cast<float>(c.vocab_size - 1)));
    std::vector<double> prefill, decode, step_ms;
    for (int64_t r = 0; r <= a.repeats; ++r) {  // the first run warms up
      model::GenerationTimes t;
      model::generate_batch(*model, *arena, prompts, a.tokens, {.temperature = 0}, -1, &t);
      if (r == 0) continue;
      prefill.push_back(t.prefill_tokens_per_second());
      decode.push_back(t.decode_tokens_per_second());
      step_ms.push_back(1e3 * t.decode_seconds / static_cast<double>(a.tokens - 1));
    }
    const Range p = range_of(prefill), d = range_of(decode), s = range_of(step_ms);
    if (a.json) {
      rows.push_back(
          {{"batch", B},
           {"prefill_tokens_per_s", {{"median", p.median}, {"min", p.min}, {"max", p.max}}},
           {"decode_tokens_per_s", {{"median", d.median}, {"min", d.min}, {"max", d.max}}},
           {"ms_per_step", {{"median", s.median}, {"min", s.min}, {"max", s.max}}}});
      continue;
    }
    char pt[64], dt[64], st[64];
    std::snprintf(pt, sizeof pt, "%.0f [%.0f-%.0f]", p.median, p.min, p.max);
    std::snprintf(dt, sizeof dt, "%.1f [%.1f-%.1f]", d.median, d.min, d.max);
    std::snprintf(st, sizeof st, "%.2f", s.median);
    std::printf("%-8ld %28s %28s %12s\n", static_cast<long>(B), pt, dt, st);
    std::fflush(stdout);
  }
  if (a.json) {
    std::printf("%s\n", nlohmann::json{{"prompt", a.prompt},
                                       {"tokens", a.tokens},
                                       {"precision", precision},
                                       {"threads", num_threads()},
                                       {"weights_mb_per_token", weight_mb},
                                       {"repeats", a.repeats},
                                       {"results", rows}}
                            .dump()
                            .c_str());
  } else {
    std::printf(
        "prompt %ld tokens, %ld generated per sequence (greedy), %s, %d threads; median "
        "[min-max] of %ld runs after one warm-up; a batch-1 step reads %.1f MB of "
        "weights\n",
        static_cast<long>(a.prompt), static_cast<long>(a.tokens), precision,
        num_threads(), static_cast<long>(a.repeats), weight_mb);
  }
}

}  // namespace

void add_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Measure the model's speed");
  bench->require_subcommand(1);
  auto a = std::make_shared<DecodeArgs>();
  auto* cmd = bench->add_subcommand(
      "decode", "Prefill and per-token decode tokens/s, single-stream and batched");
  cmd->add_option("--model", a->model, "A model JSON (randomly initialized weights)");
  cmd->add_option("--checkpoint", a->checkpoint, "A run directory or a checkpoint directory");
  cmd->add_option("--batch", a->batch, "Batch sizes, e.g. 1,8")->delimiter(',');
  cmd->add_option("--prompt", a->prompt, "Prompt tokens per sequence");
  cmd->add_option("--tokens", a->tokens, "Tokens generated per sequence");
  add_precision_option(cmd, a->precision);
  cmd->add_option("--repeats", a->repeats, "Timed runs per batch size (after one warm-up)");
  cmd->add_option("--seed", a->seed, "Seed of the prompts (and of --model's weights)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a] { run_decode_bench(*a); });
}

}  // namespace k3::apps
