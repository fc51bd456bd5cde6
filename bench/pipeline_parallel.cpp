// Pipeline parallelism, measured against its plan (bench/pipeline_parallel.sh runs it under
// mpirun, one thread a rank): k3-micro (8 layers) split over the job's ranks, for GPipe, 1F1B,
// ZB-H1 and the interleaved 1F1B (vp 2) at several micro-batch counts. For each, the step time
// (median of the timed steps, slowest rank), the measured bubble (idle over busy, summed over
// ranks, from every rank's timed nodes of the median step) beside the plan's (unit costs,
// simulate.h) and Megatron-Core's (p - 1) / (v·m). With --plot FILE, the interleaved run at the
// most micro-batches is drawn: its planned timeline above the measured one.
//
//   bench_pipeline_parallel [--rows R] [--seq T] [--steps N] [--plot FILE.svg]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/svg_plot.h"
#include "k3/base/timer.h"
#include "k3/parallel/pipeline/timeline_chart.h"
#include "trainee.h"

namespace {

using namespace k3;
namespace pl = parallel::pipeline;

struct Result {
  double seconds;
  pl::Timeline measured;
};

Result run(const model::ModelConfig& c, const dist::ProcessGrid& grid, pl::ScheduleKind kind,
           int vp, int micro, int64_t rows, int64_t seq, int steps) {
  parallel::ParallelStepOptions options;
  options.schedule = kind;
  options.stage_arena_bytes = size_t{1} << 30;
  bench::Trainee t(c, grid, "adamw", options,
                   model::PipelineSplit::make(c.num_hidden_layers, grid.dims().pp, vp));
  const bench::Batch batch(micro, rows, seq, c.vocab_size);
  std::vector<std::pair<double, pl::Timeline>> timed;
  for (int s = 0; s < steps + 1; ++s) {
    grid.world().barrier();
    Timer clock;
    t.dp.forward_backward(t.arena, t.acts, batch.share(0, rows));
    const double seconds = bench::max_over_ranks(grid.world(), clock.seconds());
    pl::Timeline measured = pl::gather_timeline(grid.pp(), t.dp.measured());
    if (s > 0) timed.emplace_back(seconds, std::move(measured));  // the first step warms up
  }
  std::sort(timed.begin(), timed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  auto& median = timed[timed.size() / 2];
  return {median.first, std::move(median.second)};
}

}  // namespace

int main(int argc, char** argv) {
  return k3::bench::mpi_main(argc, argv, [](int argc, char** argv) {
    const auto flags = bench::parse_flags(argc, argv, {"--rows", "--seq", "--steps", "--plot"});
    auto get = [&](const char* f, int64_t d) {
      return flags.count(f) ? std::stoll(flags.at(f)) : d;
    };
    const int64_t rows = get("--rows", 2), seq = get("--seq", 128);
    const int steps = static_cast<int>(get("--steps", 5));
    const model::ModelConfig c =
        model::load_model_config(std::string(K3_BENCH_DIR) + "/../configs/k3-micro.json");
    const dist::Comm world = dist::Comm::world();
    const dist::ProcessGrid grid(dist::ParallelDims{.pp = world.size()}, world);
    const int p = world.size();
    if (world.rank() == 0)
      std::printf(
          "k3-micro over pp %d, micro-batches of %lld x %lld tokens, median of %d steps\n"
          "%-12s %3s %3s %10s %9s %9s %9s\n",
          p, static_cast<long long>(rows), static_cast<long long>(seq), steps, "schedule", "vp",
          "m", "step (s)", "measured", "planned", "(p-1)/vm");
    struct Case {
      pl::ScheduleKind kind;
      int vp, m;
    };
    std::vector<Case> cases;
    for (int m : {2, 4, 8}) {
      cases.push_back({pl::ScheduleKind::gpipe, 1, m});
      cases.push_back({pl::ScheduleKind::one_f_one_b, 1, m});
      cases.push_back({pl::ScheduleKind::zero_bubble, 1, m});
      if (m >= p) cases.push_back({pl::ScheduleKind::interleaved, 2, m});
    }
    for (const Case& k : cases) {
      pl::ScheduleShape shape;
      shape.kind = k.kind;
      shape.pp = p;
      shape.vp = k.vp;
      shape.microbatches = k.m;
      const pl::Schedule schedule = pl::make_schedule(shape);
      const pl::Timeline planned = pl::simulate(schedule);
      const Result r = run(c, grid, k.kind, k.vp, k.m, rows, seq, steps);
      if (world.rank() != 0) continue;
      std::printf("%-12s %3d %3d %10.3f %9.3f %9.3f %9.3f\n", pl::schedule_kind_name(k.kind), k.vp,
                  k.m, r.seconds, r.measured.bubble_ratio(), planned.bubble_ratio(),
                  static_cast<double>(p - 1) / (k.vp * k.m));
      if (flags.count("--plot") && k.kind == pl::ScheduleKind::interleaved && k.m == 8) {
        write_svg(flags.at("--plot"),
                  render_gantt(pl::timeline_chart(schedule, planned, &r.measured)));
        std::printf("plot: %s\n", flags.at("--plot").c_str());
      }
    }
  });
}
