// The vision tower under pipeline parallelism (bench/vision_filler.sh runs it under mpirun, one
// thread a rank): k3-micro-vision (k3-micro with a four-block tower, 16 image tokens per image)
// over pp ranks with 1F1B, on image-text micro-batches (one 32×32 image a row), its tower run
//   in the bubbles   as filler nodes on rank 0, each before the forward that needs it;
//   before           all the fillers ahead of rank 0's first forward;
//   in the forward   inside the first stage's forward (no fillers);
// beside text only: k3-micro on text micro-batches of the same shape, and on two ranks the fillers
// with one layer moved off rank 0 (layers 3 + 5), at 2, 4 and 8 micro-batches a step. The cases
// take their steps in turn. For each: the step time (median of the timed steps, slowest rank) and
// the measured bubble (idle over busy, over ranks).
//
//   bench_vision_filler [--rows R] [--seq T] [--steps N]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/timer.h"
#include "k3/data/image_text.h"
#include "k3/parallel/pipeline/timeline_chart.h"
#include "k3/train/loop/image_text_data.h"
#include "trainee.h"

namespace {

using namespace k3;
namespace pl = parallel::pipeline;

// One case's model and step, timed side by side with the others: the cases take their steps in
// turn, so a noisy moment slows every case alike.
struct Timed {
  std::unique_ptr<bench::Trainee> t;
  const std::vector<model::TokenBatch>* micro;
  std::vector<std::pair<double, double>> steps;  // (seconds, bubble)
  Timed(const model::ModelConfig& c, const dist::ProcessGrid& grid, pl::Fillers fillers,
        const std::vector<int64_t>& layers, const std::vector<model::TokenBatch>& batch)
      : micro(&batch) {
    parallel::ParallelStepOptions options;
    options.fillers = fillers;
    options.stage_arena_bytes = size_t{1} << 30;
    t = std::make_unique<bench::Trainee>(
        c, grid, "adamw", options,
        model::PipelineSplit::make(c.num_hidden_layers, grid.dims().pp, 1, layers));
  }
  void step(const dist::ProcessGrid& grid, bool record) {
    grid.world().barrier();
    Timer clock;
    t->dp.forward_backward(t->arena, t->acts, *micro);
    const double seconds = bench::max_over_ranks(grid.world(), clock.seconds());
    const double bubble = pl::gather_timeline(grid.pp(), t->dp.measured()).bubble_ratio();
    if (record) steps.emplace_back(seconds, bubble);
  }
  std::pair<double, double> median() {
    std::sort(steps.begin(), steps.end());
    return steps[steps.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  return k3::bench::mpi_main(argc, argv, [](int argc, char** argv) {
    const auto flags = bench::parse_flags(argc, argv, {"--rows", "--seq", "--steps"});
    auto get = [&](const char* f, int64_t d) {
      return flags.count(f) ? std::stoll(flags.at(f)) : d;
    };
    const int64_t rows = get("--rows", 2), seq = get("--seq", 128);
    const int steps = static_cast<int>(get("--steps", 9));
    const std::string configs = std::string(K3_BENCH_DIR) + "/../configs/";
    const model::ModelConfig vision = model::load_model_config(configs + "k3-micro-vision.json"),
                             text = model::load_model_config(configs + "k3-micro.json");
    const dist::Comm world = dist::Comm::world();
    const dist::ProcessGrid grid(dist::ParallelDims{.pp = world.size()}, world);

    const data::ImageTextFormat f = train::image_text_format(vision);
    if (world.rank() == 0)
      std::printf(
          "k3-micro-vision over pp %d, 1F1B, micro-batches of %lld x %lld tokens (one "
          "%lldx%lld image a row, %lld image tokens), median of %d steps\n"
          "%3s %-28s %10s %9s\n",
          world.size(), static_cast<long long>(rows), static_cast<long long>(seq),
          static_cast<long long>(f.image_size), static_cast<long long>(f.image_size),
          static_cast<long long>(f.image_tokens), steps, "m", "vision tower", "step (s)", "bubble");
    for (int micro : {2, 4, 8}) {
      std::vector<train::ImageTextBatch> pictures;
      std::vector<model::TokenBatch> with_images;
      for (int m = 0; m < micro; ++m)
        pictures.push_back({data::image_text_rows(3, m * rows, rows, seq, f)});
      for (const train::ImageTextBatch& p : pictures) with_images.push_back(p.view());
      const bench::Batch words(micro, rows, seq, text.vocab_size);
      const std::vector<model::TokenBatch> text_batches = words.share(0, rows);
      struct Case {
        const char* name;
        const model::ModelConfig* config;
        pl::Fillers fillers;
        std::vector<int64_t> layers = {};  // per stage; empty: even
      };
      std::vector<Case> cases = {{"in the bubbles (fillers)", &vision, pl::Fillers::in_bubbles},
                                 {"before the pipeline", &vision, pl::Fillers::before},
                                 {"in the first stage's forward", &vision, pl::Fillers::none},
                                 {"none (text only)", &text, pl::Fillers::none}};
      // The tower makes rank 0's stage the longest: one layer fewer there balances the pipeline.
      if (world.size() == 2)
        cases.push_back({"fillers, layers 3 + 5", &vision, pl::Fillers::in_bubbles, {3, 5}});
      std::vector<Timed> timed;
      for (const Case& k : cases)
        timed.emplace_back(*k.config, grid, k.fillers, k.layers,
                           k.config == &text ? text_batches : with_images);
      for (int step = 0; step < steps + 1; ++step)  // the first step warms up
        for (Timed& t : timed) t.step(grid, step > 0);
      for (size_t i = 0; i < cases.size(); ++i) {
        const auto [seconds, bubble] = timed[i].median();
        if (world.rank() == 0)
          std::printf("%3d %-28s %10.3f %9.3f\n", micro, cases[i].name, seconds, bubble);
      }
    }
  });
}
