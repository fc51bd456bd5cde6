// What the model-level parallel tests share: a global batch of micro-batches, and a model on a
// process grid with its data-parallel step (ParallelStep), which also runs every one-process
// reference (on the grid of one process).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/model_util.h"
#include "common/test_util.h"
#include "common/tp_util.h"
#include "k3/data/image_text.h"
#include "k3/dist/grid.h"
#include "k3/model/model.h"
#include "k3/optim/param_groups.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/parallel_step.h"
#include "k3/train/loop/image_text_data.h"
#include "k3/train/preflight/memory_estimate.h"

namespace k3::parallel::testing {

constexpr int64_t kRows = 4, kT = 16, kMicro = 2;

// k3-nano: KDA, gated MLA, LatentMoE, Attention Residuals.
inline model::ModelConfig nano() {
  return model::load_model_config(k3::testing::source_dir() + "/configs/k3-nano.json");
}

// The global batch of step `step`: `micro` micro-batches (kMicro) of `rows` rows, some targets
// ignored (unevenly over rows, so the ranks count different numbers of tokens). With `docs`
// (document starts within a row, from 0) every row packs documents starting there.
struct GlobalBatch {
  int64_t T, rows;  // tokens per row, rows per micro-batch
  std::vector<std::vector<int32_t>> tokens, targets;
  std::vector<int64_t> doc_starts;  // of all rows end to end; a share of n rows takes a prefix
  GlobalBatch(const model::ModelConfig& c, int step, int64_t seq = kT, int64_t n_rows = kRows,
              const std::vector<int64_t>& docs = {}, int micro = kMicro)
      : T(seq), rows(n_rows) {
    for (int64_t r = 0; r < (docs.empty() ? 0 : rows); ++r)
      for (int64_t d : docs) doc_starts.push_back(r * T + d);
    std::mt19937 rng(1000 + static_cast<unsigned>(step));
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
    for (int m = 0; m < micro; ++m) {
      tokens.emplace_back(rows * T);
      targets.emplace_back(rows * T);
      for (int64_t i = 0; i < rows * T; ++i) {
        tokens.back()[static_cast<size_t>(i)] = tok(rng);
        const int64_t row = i / T;
        targets.back()[static_cast<size_t>(i)] =
            (i % T) < row * 3 ? static_cast<int32_t>(c.ignore_index) : tok(rng);
      }
    }
  }
  // Rows [first, first + n) of every micro-batch.
  std::vector<model::TokenBatch> share(int64_t first, int64_t n) const {
    const auto docs_end = std::lower_bound(doc_starts.begin(), doc_starts.end(), n * T);
    const std::span<const int64_t> docs(doc_starts.data(), docs_end - doc_starts.begin());
    std::vector<model::TokenBatch> out;
    for (size_t m = 0; m < tokens.size(); ++m)
      out.push_back({tokens[static_cast<size_t>(m)].data() + first * T,
                     targets[static_cast<size_t>(m)].data() + first * T, n, T, docs});
    return out;
  }
};

// A global batch of the built-in image-text corpus (data/image_text.h) for a model with a vision
// tower: `micro` micro-batches of `rows` rows of T tokens, one image a row.
struct ImageTextBatch {
  int64_t T, rows;
  std::vector<data::ImageTextRows> micro_batches;
  ImageTextBatch(const model::ModelConfig& c, int step, int64_t seq, int64_t n_rows, int micro)
      : T(seq), rows(n_rows) {
    for (int m = 0; m < micro; ++m)
      micro_batches.push_back(data::image_text_rows(17, (step * micro + m) * rows, rows, T,
                                                    train::image_text_format(c)));
  }
  // Rows [first, first + n) of every micro-batch, with their images.
  std::vector<model::TokenBatch> share(int64_t first, int64_t n) const {
    std::vector<model::TokenBatch> out;
    for (const data::ImageTextRows& r : micro_batches) {
      model::TokenBatch b{r.tokens.data() + first * T, r.targets.data() + first * T, n, T};
      b.images = r.images.data() + first * static_cast<int64_t>(r.images.size()) / rows;
      b.num_images = n;
      out.push_back(b);
    }
    return out;
  }
};

struct Setup {
  int zero;
  const char* optimizer;  // "adamw" or "muon"
  // Pipeline parallelism (grid pp > 1): the schedule, and the split (empty: even, vp 1).
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::one_f_one_b;
  model::PipelineSplit split = {};
  pipeline::Fillers fillers = pipeline::Fillers::in_bubbles;  // with a vision tower
  bool muon_per_head =
      true;  // train.muon_per_head: false orthogonalizes the per-head tensors whole
};

// A model on `grid`, initialized, its routers spread (common/model_util.h: layouts that differ only
// in rounding then stay together over many steps), with its data-parallel step.
struct Trainee {
  model::Model model;
  Arena arena{size_t{256} << 20, false};
  activation::ActivationManager acts;
  ParallelStep dp;
  Trainee(const dist::ProcessGrid& grid, const Setup& s, const model::ModelConfig& c = nano())
      : model(c, true, grid, s.split),
        dp(model, grid, plan(model, s.optimizer, s.muon_per_head), {}, options(s)) {
    model.initialize(7);
    k3::testing::spread_routers(model);
  }
  // The parameter groups a run with train.optimizer and train.muon_per_head takes.
  static std::vector<optim::Assignment> plan(const model::Model& m, const std::string& optimizer,
                                             bool muon_per_head = true) {
    train::TrainSection t;
    t.optimizer = optimizer;
    t.muon_per_head = muon_per_head;
    return train::optimizer_plan(param_set(m.params()).slots, m.config(), t);
  }
  static ParallelStepOptions options(const Setup& s) {
    return {.zero = s.zero,
            .bucket_floats = 20000,  // several buckets
            .overlap = true,
            .schedule = s.schedule,
            .group = 0,
            .fillers = s.fillers,
            .stage_arena_bytes = size_t{64} << 20};
  }
  StepTotals step(const GlobalBatch& b, bool apply) {
    const StepTotals t =
        dp.forward_backward(arena, acts, b.share(dp.first_row(b.rows), dp.rows(b.rows)));
    if (apply) dp.apply(2e-3f, 1.0f);
    return t;
  }
  // Sets this run's parameters (its shards of them) and optimizer state to those of `one`, a
  // one-process run, as loading its checkpoint would.
  void take_state_of(Trainee& one) {
    model::ParamRegistry &mine = model.params(), &theirs = one.model.params();
    for (int i = 0; i < mine.size(); ++i) {
      const std::vector<float> shard =
          k3::testing::shard_of(mine.info(i), theirs.value(theirs.find(mine.info(i).name)).f32());
      std::copy(shard.begin(), shard.end(), mine.value(i).f32());
    }
    const auto state = one.dp.optimizer().gather_state();
    dp.optimizer().restore_state([&](const std::string& name) -> const Tensor* {
      for (const auto& [n, t] : state)
        if (n == name) return &t;
      return nullptr;
    });
  }
};

// One forward and backward of `one` (a one-process run) and `run` on b: the token count, the loss
// (1e-6 relative), the gradient norm (1e-5) and every gradient `run` holds (1e-4 of its tensor's
// largest entry; under ZeRO-2 only this rank's pieces of the reduced gradient). Returns the
// loss's relative difference and the worst gradient error.
inline std::pair<double, double> expect_step_matches(Trainee& one, Trainee& run,
                                                     const GlobalBatch& b, int zero) {
  const auto share = [&](Trainee& t) { return b.share(t.dp.first_row(b.rows), t.dp.rows(b.rows)); };
  const StepTotals want = one.dp.forward_backward(one.arena, one.acts, share(one));
  const StepTotals got = run.dp.forward_backward(run.arena, run.acts, share(run));
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-5 * want.grad_norm);
  const model::ParamRegistry &r = one.model.params(), &p = run.model.params();
  const std::vector<FlatRange> held =
      zero == 2 ? run.dp.layout().owned() : std::vector<FlatRange>{{0, p.flat_size()}};
  double worst = 0;
  for (int i = 0; i < p.size(); ++i) {
    const model::ParamInfo& info = p.info(i);
    const std::vector<float> whole = k3::testing::shard_of(info, r.grad(r.find(info.name)).f32());
    for (const FlatRange& h : held) {
      const size_t lo = std::max(h.begin, info.offset),
                   hi = std::min(h.end, info.offset + static_cast<size_t>(info.local_numel()));
      if (lo >= hi) continue;
      const double e = k3::testing::max_rel_error(p.grads() + lo, whole.data() + (lo - info.offset),
                                                  static_cast<int64_t>(hi - lo));
      EXPECT_LT(e, 1e-4) << info.name;
      worst = std::max(worst, e);
    }
  }
  return {std::abs(got.loss - want.loss) / want.loss, worst};
}

// One step of `run` taken from where `one` (a one-process run) is, beside `one`'s own step, so
// that what is compared is one step's arithmetic, not how far rounding carries two runs apart
// over many. Returns the loss's relative difference; expects every tensor's update (on this
// rank's shard) within `tolerance` of its size, ‖Δ update‖ / ‖update‖, and adds the largest to
// `worst_update`.
inline double step_from(Trainee& one, Trainee& run, const GlobalBatch& b, double tolerance,
                        double& worst_update) {
  run.take_state_of(one);
  model::ParamRegistry &r = one.model.params(), &p = run.model.params();
  std::vector<std::vector<float>> before;
  for (int i = 0; i < p.size(); ++i)
    before.emplace_back(p.value(i).f32(), p.value(i).f32() + p.info(i).local_numel());
  const StepTotals want = one.step(b, true), got = run.step(b, true);
  for (int i = 0; i < p.size(); ++i) {
    const model::ParamInfo& info = p.info(i);
    const std::vector<float> after = k3::testing::shard_of(info, r.value(r.find(info.name)).f32());
    const float* mine = p.value(i).f32();
    double diff = 0, size = 0;
    for (int64_t k = 0; k < info.local_numel(); ++k) {
      diff += std::pow(static_cast<double>(mine[k]) - after[k], 2);
      size += std::pow(static_cast<double>(after[k]) - before[static_cast<size_t>(i)][k], 2);
    }
    const double e = size > 0 ? std::sqrt(diff / size) : std::sqrt(diff);
    EXPECT_LT(e, tolerance) << info.name;
    worst_update = std::max(worst_update, e);
  }
  return std::abs(got.loss - want.loss) / want.loss;
}

// `steps` steps of `run`, each from where `one` is (step_from) on global batches of `rows` rows
// of `seq` tokens (packing documents at `docs`): every loss within 1e-6 relative and every update
// within 3e-2 of its size; world rank 0 prints the worst of both under `what`.
inline void expect_steps_from(Trainee& one, Trainee& run, int steps, int64_t seq,
                              const std::string& what, int64_t rows = kRows,
                              const std::vector<int64_t>& docs = {}, int micro = kMicro) {
  double worst_loss = 0, worst_update = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    const double loss =
        step_from(one, run, GlobalBatch(one.model.config(), step, seq, rows, docs, micro), 3e-2,
                  worst_update);
    EXPECT_LT(loss, 1e-6);
    worst_loss = std::max(worst_loss, loss);
  }
  if (dist::Comm::world().rank() == 0)
    std::printf("%s: %d steps, losses within %.2g relative, updates within %.3g\n", what.c_str(),
                steps, worst_loss, worst_update);
}

}  // namespace k3::parallel::testing
