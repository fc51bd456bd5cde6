// What the benchmarks under mpirun share: their main, a global batch of random tokens, a model on
// the grid with its data-parallel step, and a figure's extreme over the ranks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "k3/base/threads.h"
#include "k3/dist/grid.h"
#include "k3/dist/runtime.h"
#include "k3/model/model.h"
#include "k3/optim/param_groups.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/parallel_step.h"
#include "k3/train/preflight/preflight.h"
#include "train_step.h"

namespace k3::bench {

// main(): MPI started (a world of one without a launcher), this rank's threads set, then
// body(argc, argv); an error ends the whole job in one line naming the rank.
template <typename Body>
int mpi_main(int argc, char** argv, Body body) {
  const dist::Runtime runtime(&argc, &argv);
  try {
    set_num_threads();
    body(argc, argv);
  } catch (const std::exception& e) {
    dist::fail(e.what());
  }
  return 0;
}

// `micro` micro-batches of rows × seq random tokens, each its own targets (every one counted),
// reused every step: only the timing and the traffic matter here.
struct Batch {
  int64_t seq;
  std::vector<std::vector<int32_t>> tokens;
  Batch(int64_t micro, int64_t rows, int64_t seq, int64_t vocab)
      : seq(seq), tokens(static_cast<size_t>(micro)) {
    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
    for (std::vector<int32_t>& m : tokens)
      for (int64_t i = 0; i < rows * seq; ++i) m.push_back(tok(rng));
  }
  // Rows [first, first + rows) of every micro-batch.
  std::vector<model::TokenBatch> share(int64_t first, int64_t rows) const {
    std::vector<model::TokenBatch> out;
    for (const std::vector<int32_t>& m : tokens)
      out.push_back({m.data() + first * seq, m.data() + first * seq, rows, seq});
    return out;
  }
};

// A model on the grid with its data-parallel step; `optimizer` is "adamw" (everything) or
// "muon" (K3's groups).
struct Trainee {
  model::Model model;
  Arena arena{size_t{4} << 30, false};
  activation::ActivationManager acts;
  parallel::ParallelStep dp;
  Trainee(const model::ModelConfig& c, const dist::ProcessGrid& grid, const std::string& optimizer,
          parallel::ParallelStepOptions options, model::PipelineSplit split = {})
      : model(c, true, grid, std::move(split)),
        dp(model, grid, optimizer_plan(model, optimizer), {}, options) {
    model.initialize(7);
  }
};

// Per entry, the largest (or smallest) value over ranks: every rank's values reach every rank
// as a sum of zero-padded slots.
inline std::vector<double> over_ranks(const dist::Comm& world, const std::vector<double>& mine,
                                      bool largest = true) {
  const size_t n = mine.size();
  std::vector<double> all(n * static_cast<size_t>(world.size()), 0.0), out(mine);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(n * world.rank()));
  world.all_reduce(all.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i)
    out[i % n] = largest ? std::max(out[i % n], all[i]) : std::min(out[i % n], all[i]);
  return out;
}
inline double max_over_ranks(const dist::Comm& world, double mine) {
  return over_ranks(world, {mine})[0];
}

}  // namespace k3::bench
