// `k3lab schedule pipeline --pp P --vp V --microbatches M [--group G]
//   [--kind interleaved|1f1b|gpipe|zb] [--fillers | --fillers-before] [--comm] [--plot FILE.svg]`:
// the nodes each pipeline rank runs in one step, the planned timeline with unit costs, its bubble
// against Megatron-Core's (p - 1) / (v·m), and a drawing of it.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "k3/apps/commands.h"
#include "k3/parallel/pipeline/schedule.h"
#include "k3/parallel/pipeline/simulate.h"
#include "k3/parallel/pipeline/timeline_chart.h"

namespace k3::apps {
namespace {

namespace pl = parallel::pipeline;

void print_schedule(const pl::Schedule& s, bool comm) {
  std::printf("%s\n", pl::describe(s.shape).c_str());
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    std::printf("rank %zu:", r);
    for (const pl::Node& n : s.ranks[r])
      if (comm || pl::is_compute(n.op)) std::printf(" %s", pl::node_label(n, s.shape.vp).c_str());
    std::printf("\n");
  }
}

void print_plan(const pl::Schedule& s, const pl::Timeline& t) {
  const pl::ScheduleShape& sh = s.shape;
  std::printf(
      "planned, in unit costs (a stage's forward 1, its backward %g; a chunk 1/%d of that):\n",
      sh.costs.backward_input + sh.costs.backward_weight, sh.vp);
  std::printf("  step time %.4g, bubble (idle / busy) %.4f; (p - 1) / (v·m) = %.4f\n", t.makespan(),
              t.bubble_ratio(), static_cast<double>(sh.pp - 1) / (sh.vp * sh.microbatches));
  std::printf("  peak micro-batch chunks in flight by rank:");
  for (int r = 0; r < sh.pp; ++r) std::printf(" %d", t.peak_in_flight(r));
  std::printf("\n");
}

}  // namespace

void add_pipeline_schedule(CLI::App& schedule) {
  struct Args {
    std::string kind, plot;
    int pp = 4, vp = 1, microbatches = 8, group = 0;
    bool fillers = false, fillers_before = false, comm = false;
    double filler_cost = 0.5;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = schedule.add_subcommand(
      "pipeline",
      "Show a pipeline schedule: each rank's nodes, the planned timeline and its bubble");
  cmd->add_option("--pp", a->pp, "Pipeline ranks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--vp", a->vp, "Virtual stages (model chunks) per rank")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--microbatches", a->microbatches, "Micro-batches per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--group", a->group,
                  "interleaved: micro-batches per group through each chunk (default: pp)");
  cmd->add_option("--kind", a->kind,
                  "gpipe, 1f1b, interleaved or zb (ZB-H1); default: interleaved when --vp > 1, "
                  "else 1f1b");
  cmd->add_flag("--fillers", a->fillers,
                "Place one encoder forward per micro-batch on rank 0, in the bubbles");
  cmd->add_flag("--fillers-before", a->fillers_before,
                "The same fillers, all before rank 0's first forward")
      ->excludes("--fillers");
  cmd->add_option("--filler-cost", a->filler_cost, "A filler's cost, in stage forwards")
      ->capture_default_str();
  cmd->add_flag("--comm", a->comm, "List the sends (sF, sB) and receives (rF, rB) too");
  cmd->add_option("--plot", a->plot, "Draw the planned timeline as SVG");
  cmd->callback([a] {
    pl::ScheduleShape shape;
    shape.kind =
        pl::parse_schedule_kind(a->kind.empty() ? (a->vp > 1 ? "interleaved" : "1f1b") : a->kind);
    shape.pp = a->pp;
    shape.vp = a->vp;
    shape.microbatches = a->microbatches;
    shape.group = a->group;
    shape.fillers = a->fillers          ? pl::Fillers::in_bubbles
                    : a->fillers_before ? pl::Fillers::before
                                        : pl::Fillers::none;
    shape.costs.filler = a->filler_cost;
    const pl::Schedule s = pl::make_schedule(shape);
    const pl::Timeline t = pl::simulate(s);
    print_schedule(s, a->comm);
    print_plan(s, t);
    if (!a->plot.empty()) {
      write_svg(a->plot, render_gantt(pl::timeline_chart(s, t, nullptr)));
      std::printf("plot: %s\n", a->plot.c_str());
    }
  });
}

}  // namespace k3::apps
