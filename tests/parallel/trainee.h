// What the model-level parallel tests share: a global batch of micro-batches, and a model on a
// process grid with its data-parallel step (DataParallel), which also runs every one-process
// reference (on the grid of one process).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "common/model_util.h"
#include "common/test_util.h"
#include "k3/dist/grid.h"
#include "k3/model/model.h"
#include "k3/optim/param_groups.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/zero/data_parallel.h"

namespace k3::parallel::testing {

constexpr int64_t kRows = 4, kT = 16, kMicro = 2;

// k3-nano (KDA, gated MLA, LatentMoE, Attention Residuals), its vocabulary rounded up to 260 so
// that it also splits over tp = 2 and 4.
inline model::ModelConfig nano(int64_t vocab = 259) {
  model::ModelConfig c =
      model::load_model_config(k3::testing::source_dir() + "/configs/k3-nano.json");
  c.vocab_size = vocab;
  return c;
}

// The global batch of step `step`: kMicro micro-batches of kRows rows, some targets ignored
// (unevenly over rows, so the ranks count different numbers of tokens).
struct GlobalBatch {
  std::vector<std::vector<int32_t>> tokens, targets;
  GlobalBatch(const model::ModelConfig& c, int step) {
    std::mt19937 rng(1000 + static_cast<unsigned>(step));
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
    for (int m = 0; m < kMicro; ++m) {
      tokens.emplace_back(kRows * kT);
      targets.emplace_back(kRows * kT);
      for (int64_t i = 0; i < kRows * kT; ++i) {
        tokens.back()[static_cast<size_t>(i)] = tok(rng);
        const int64_t row = i / kT;
        targets.back()[static_cast<size_t>(i)] =
            (i % kT) < row * 3 ? static_cast<int32_t>(c.ignore_index) : tok(rng);
      }
    }
  }
  // Rows [first, first + rows) of every micro-batch.
  std::vector<model::TokenBatch> share(int64_t first, int64_t rows) const {
    std::vector<model::TokenBatch> out;
    for (int m = 0; m < kMicro; ++m)
      out.push_back({tokens[static_cast<size_t>(m)].data() + first * kT,
                     targets[static_cast<size_t>(m)].data() + first * kT, rows, kT});
    return out;
  }
};

struct Setup {
  int zero;
  const char* optimizer;  // "adamw" or "muon"
};

// A model on `grid`, initialized (with `spread` its routers spread: model_util.h), with its
// data-parallel step.
struct Trainee {
  model::Model model;
  Arena arena{size_t{256} << 20, false};
  activation::ActivationManager acts;
  DataParallel dp;
  Trainee(const dist::ProcessGrid& grid, const Setup& s, const model::ModelConfig& c = nano(),
          bool spread = false)
      : model(c, true, grid), dp(model, grid, plan(model, s.optimizer), {}, options(s)) {
    model.initialize(7);
    if (spread) k3::testing::spread_routers(model);
  }
  static std::vector<optim::Assignment> plan(const model::Model& m, const std::string& optimizer) {
    const auto slots = param_set(m.params()).slots;
    const std::vector<std::string> rules =
        optimizer == "adamw" ? optim::adamw_only_rules() : std::vector<std::string>{};
    return optim::assign_param_groups(slots, head_sizes(m.config()), rules);
  }
  static DataParallelOptions options(const Setup& s) {
    return {.zero = s.zero, .bucket_floats = 20000, .overlap = true};  // several buckets
  }
  StepTotals step(const GlobalBatch& b, bool apply) {
    const StepTotals t =
        dp.forward_backward(arena, acts, b.share(dp.first_row(kRows), dp.rows(kRows)));
    if (apply) dp.apply(2e-3f, 1.0f);
    return t;
  }
};

}  // namespace k3::parallel::testing
