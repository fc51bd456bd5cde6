// The activation manager's policies on k3-small (12 layers, d 512: KDA and gated MLA 3:1,
// LatentMoE of 32 experts, Attention Residuals) at one sequence of T tokens: for each policy the
// peak activation memory (the step arena's peak + the manager's pool peak, measured), what went to
// the host, and the median step time (forward + backward), beside keep:
//   keep                 every saved tensor held
//   recompute            every layer half re-run before its backward (sublayer granularity)
//   recompute, layer     every layer re-run whole (only its input kept)
//   selective            the feed-forwards (LatentMoE, dense MLP) recomputed, attention kept
//   fp8                  E4M3 with a scale per 128 values (statistics and states kept)
//   offload              to host memory by a background thread, fetched a segment ahead
//   budget 1, 2          budget mode at 60% and 30% of the way from the least (everything
//                        recomputed) to keep's peak
// The cases take their steps in turn, after a first untimed step each; with --in-turn 0 (for long
// sequences, where every case's memory at once would not fit) each case runs all its steps and
// frees its memory before the next.
//
// "held after forward" is what the forward leaves for the backward: the arena in use (the stream,
// the head's gradient) plus the manager's pool.
//
//   bench_activation_policies [--seq 4096] [--batch 1] [--steps 2] [--threads 0] [--in-turn 1]
//                             [--config configs/k3-small.json]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/activation/budget.h"
#include "k3/base/format.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "k3/model/model.h"
#include "k3/train/loop/activations.h"

namespace {

using namespace k3;
using activation::Granularity;
using activation::Policy;
using activation::PolicyRules;

struct Case {
  std::string name;
  PolicyRules rules;
  Granularity granularity = Granularity::Sublayer;
  std::unique_ptr<activation::ActivationManager> acts =
      std::make_unique<activation::ActivationManager>();
  std::vector<double> seconds;
  size_t peak = 0, arena = 0, offloaded = 0, held = 0;
  double recompute = 0, waits = 0, fp8 = 0, copies = 0;
  std::vector<activation::SegmentProfile> profile;
};

double mib(size_t b) { return static_cast<double>(b) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  const auto flags = bench::parse_flags(
      argc, argv, {"--seq", "--batch", "--steps", "--threads", "--in-turn", "--config"});
  auto flag = [&](const char* f, int64_t d) {
    return flags.count(f) ? std::stoll(flags.at(f)) : d;
  };
  const int64_t T = flag("--seq", 4096), B = flag("--batch", 1), steps = flag("--steps", 2);
  const std::string path = flags.count("--config")
                               ? flags.at("--config")
                               : std::string(K3_BENCH_DIR) + "/../configs/k3-small.json";
  const bool in_turn = flag("--in-turn", 1) != 0;
  if (flag("--threads", 0) > 0) set_num_threads(static_cast<int>(flag("--threads", 0)));
  model::ModelConfig c = model::load_model_config(path);
  c.max_position_embeddings = std::max<int64_t>(c.max_position_embeddings, T);
  model::Model m(c);
  m.initialize(1);
  Arena arena(size_t{48} << 30, false);
  std::vector<int32_t> tokens(static_cast<size_t>(B * T)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % 256);
    targets[i] = static_cast<int32_t>((i * 7919 + 13) % 256);
  }
  const model::TokenBatch batch{tokens.data(), targets.data(), B, T};
  auto step = [&](Case& k, bool timed) {
    m.params().zero_grads();
    k.acts->reset_stats();
    arena.reset_peak();
    Timer t;
    {
      ArenaScope scope(arena);
      const model::MicroBatch mb{0, arena, *k.acts};
      m.forward_stage(mb, m.whole(), batch, 1.f / static_cast<float>(B * T), nullptr, nullptr);
      k.held = arena.used() + k.acts->stored_bytes();  // what the forward leaves for the backward
      m.backward_stage(mb, m.whole(), batch, nullptr, nullptr);
    }
    if (timed) k.seconds.push_back(t.seconds());
    k.arena = arena.peak();
    k.peak = arena.peak() + k.acts->stats().stored_peak;
    k.offloaded = k.acts->stats().offloaded_peak;
    k.recompute = k.acts->stats().recompute_seconds;
    k.waits = k.acts->stats().offload_seconds;
    k.fp8 = k.acts->stats().codec_seconds;
    k.copies = k.acts->stats().keep_seconds;
    k.profile = k.acts->profile();
  };
  std::vector<Case> cases;
  cases.reserve(8);
  auto add = [&](std::string name, PolicyRules rules, Granularity g = Granularity::Sublayer) {
    Case& c = cases.emplace_back();
    c.name = std::move(name);
    c.rules = std::move(rules);
    c.granularity = g;
    c.acts->configure(c.rules, g);
  };
  add("keep", {});
  add("recompute", {Policy::Recompute, {}});
  add("recompute, layer", {Policy::Recompute, {}}, Granularity::Layer);
  add("selective (feed-forwards)",
      {Policy::Keep, PolicyRules::parse("*.*.block_sparse_moe.*=recompute,*.*.mlp.*=recompute,"
                                        "*.*.post_attention_layernorm.*=recompute,"
                                        "*.*.mlp_res.*=recompute",
                                        "rules")});
  add("fp8", {Policy::Fp8, {}});
  add("offload", {Policy::Offload, {}});
  // Budget mode plans from the recompute case's first step (its profile and arena peak).
  for (size_t i = 0; i < 2; ++i) step(cases[i], false);
  const activation::StepCosts costs{cases[1].arena, train::measure_copy_bandwidth(), 1};
  const size_t least = activation::predict(cases[1].profile, cases[1].rules, costs).peak,
               keep = cases[0].peak;
  for (double f : {0.6, 0.3}) {
    const size_t budget = least + static_cast<size_t>(f * static_cast<double>(keep - least));
    const activation::BudgetPlan plan =
        activation::plan_budget(cases[1].profile, {}, costs, budget);
    add(strprintf("budget %.0f MiB (%d recomputed, %d offloaded)", mib(budget),
                  plan.segments_recomputed, plan.segments_offloaded),
        plan.rules);
  }
  if (in_turn) {
    for (size_t i = 2; i < cases.size(); ++i) step(cases[i], false);
    for (int64_t s = 0; s < steps; ++s)
      for (Case& k : cases) step(k, true);
  } else {
    for (size_t i = 0; i < cases.size(); ++i) {
      if (i >= 2) step(cases[i], false);
      for (int64_t s = 0; s < steps; ++s) step(cases[i], true);
      cases[i].acts.reset();  // its pool and host buffers go
    }
  }
  std::printf("%s, %lld x %lld tokens, %d threads; %lld timed steps a case (median)%s\n",
              path.c_str(), static_cast<long long>(B), static_cast<long long>(T), num_threads(),
              static_cast<long long>(steps),
              in_turn ? ", the cases in turn" : ", one case after another");
  std::printf(
      "| policy | peak activation MiB | vs keep | held after forward MiB | to host MiB | step s | "
      "vs keep | recompute s | offload waits s | fp8 s | keep copies s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double keep_s = median(cases[0].seconds);
  for (const Case& k : cases) {
    const double s = median(k.seconds);
    std::printf("| %s | %.1f | %.2f | %.1f | %.1f | %.3f | %.2f | %.3f | %.3f | %.3f | %.3f |\n",
                k.name.c_str(), mib(k.peak),
                static_cast<double>(k.peak) / static_cast<double>(keep), mib(k.held),
                mib(k.offloaded), s, s / keep_s, k.recompute, k.waits, k.fp8, k.copies);
  }
  return 0;
}
