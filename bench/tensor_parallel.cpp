// Tensor parallelism under mpirun, with and without sequence parallelism, alone and under data
// parallelism: per layout the step time, the bytes a step moves over tp against the analytic
// count (parallel/tensor/traffic.h, plus distributed Muon's point-to-point over tp under ZeRO 0)
// split by operation, the seconds the ranks spend blocked in tp and in dp operations
// (dist::Counters), and the step arena's peak per rank (the activations). A plain main (not
// Google Benchmark); bench/tensor_parallel.sh runs it in one process (the reference) and under
// mpirun -np 2 (tp2, tp2 + sp) and 4 (tp4, tp4 + sp, dp2 x tp2, dp2 x tp2 + sp), printing the
// header once.
//
// Every step starts after a barrier; its time is the slowest rank's (forward, backward,
// reductions, optimizer step). A rank's seconds in a group are its Counters' growth over the
// step: time in the operations' blocking calls and waits, not the time they ran behind
// computation. Any rank whose tp bytes over the timed steps differ from the analytic count, in
// any operation, makes the bench exit non-zero.
//
//   bench_tensor_parallel [--config PATH] [--rows N] [--seq T] [--optimizer muon|adamw]
//                         [--zero Z] [--warmup N] [--steps N] [--header 0|1]
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/timer.h"
#include "k3/parallel/tensor/traffic.h"
#include "spread.h"
#include "trainee.h"

namespace {

using namespace k3;
using bench::max_over_ranks;
using bench::over_ranks;
using bench::spread;

struct Settings {
  std::string config = std::string(K3_BENCH_DIR) + "/../configs/k3-micro.json";
  int64_t rows = 8, seq = 128;  // the micro-batch `make demo` trains k3-micro with
  std::string optimizer = "muon";
  int zero = 0;
  int warmup = 2, steps = 20;
  bool header = true;
};

constexpr size_t kBucketFloats = 1 << 20;  // the trainer's default bucket, 4 MiB
constexpr double kMiB = 1.0 / (1 << 20);

struct Layout {
  int tp, dp;
  bool sp;
  std::string name() const {
    if (tp == 1 && dp == 1) return "one process";
    return (dp > 1 ? "dp" + std::to_string(dp) + " x " : "") + "tp" + std::to_string(tp) +
           (sp ? " + sp" : "");
  }
};

std::vector<Layout> layouts(int ranks) {
  switch (ranks) {
    case 1: return {{1, 1, false}};
    case 2: return {{2, 1, false}, {2, 1, true}};
    case 4: return {{4, 1, false}, {4, 1, true}, {2, 2, false}, {2, 2, true}};
  }
  throw std::runtime_error(
      "run in one process or under mpirun -np 2 or 4 (bench/tensor_parallel.sh)");
}

// This rank's bytes over tp in one step, analytically, by operation; p2p: Muon's sends and
// receives over tp (ZeRO 0 only: under ZeRO 1 and 2 they go over tp_dp).
struct Expected {
  parallel::TpTraffic collectives;
  int64_t p2p = 0;
};
Expected expected(const Settings& s, const Layout& l, bench::Trainee& t) {
  Expected e{parallel::tp_step_traffic(t.model, l.tp), 0};
  e.collectives += parallel::tp_micro_batch_traffic(t.model.config(), l.tp, l.sp,
                                                    t.dp.rows(s.rows) * s.seq);
  const parallel::DistributedMuon* muon = t.dp.optimizer().distributed_muon();
  if (muon && s.zero == 0 && l.tp > 1) e.p2p = muon->expected_p2p_bytes();
  return e;
}

int64_t p2p_bytes(const dist::Counters& c) {
  return c[dist::Op::send].bytes + c[dist::Op::recv].bytes;
}

// Every rank's value, in rank order.
std::vector<double> every_rank(const dist::Comm& world, double mine) {
  std::vector<double> all(static_cast<size_t>(world.size()), 0.0);
  all[static_cast<size_t>(world.rank())] = mine;
  world.all_reduce(all.data(), static_cast<int64_t>(all.size()));
  return all;
}

// One cell: `value` in `format`, or "-" where the figure does not apply.
std::string cell(bool applies, const char* format, double value) {
  char text[32] = "-";
  if (applies) std::snprintf(text, sizeof text, format, value);
  return text;
}

// Returns false when this rank's tp bytes differ from the analytic count.
bool run_layout(const Settings& s, const model::ModelConfig& c, const dist::Comm& world,
                const Layout& l) {
  const dist::ProcessGrid grid({.tp = l.tp, .dp = l.dp, .sequence_parallel = l.sp}, world);
  bench::Trainee t(c, grid, s.optimizer,
                   {.zero = s.zero, .bucket_floats = kBucketFloats, .overlap = true});
  const bench::Batch batch(1, s.rows, s.seq, c.vocab_size);
  const std::vector<model::TokenBatch> share =
      batch.share(t.dp.first_row(s.rows), t.dp.rows(s.rows));
  std::vector<double> step, tp_seconds, dp_seconds;
  dist::Counters tp0, dp0;
  for (int i = 0; i < s.warmup + s.steps; ++i) {
    if (i == s.warmup) tp0 = grid.tp().counters(), dp0 = grid.dp().counters();
    world.barrier();
    const double tp_before = grid.tp().counters().seconds();
    const double dp_before = grid.dp().counters().seconds();
    const Timer timer;
    t.dp.forward_backward(t.arena, t.acts, share);
    t.dp.apply(1e-3f, 1.0f);
    if (i < s.warmup) continue;
    step.push_back(timer.seconds());
    tp_seconds.push_back(grid.tp().counters().seconds() - tp_before);
    dp_seconds.push_back(grid.dp().counters().seconds() - dp_before);
  }
  const dist::Counters &tp1 = grid.tp().counters(), &dp1 = grid.dp().counters();
  const parallel::TpTraffic moved = parallel::tp_traffic_between(tp0, tp1);
  const int64_t moved_p2p = p2p_bytes(tp1) - p2p_bytes(tp0);
  const Expected want = expected(s, l, t);
  const int64_t n = s.steps;
  const bool ok = moved.all_reduce == n * want.collectives.all_reduce &&
                  moved.all_gather == n * want.collectives.all_gather &&
                  moved.reduce_scatter == n * want.collectives.reduce_scatter &&
                  moved_p2p == n * want.p2p &&
                  tp1.bytes() - tp0.bytes() == n * (want.collectives.total() + want.p2p);

  // Bytes: the largest over ranks (Muon's differ by rank), per step.
  auto per_step = [&](int64_t bytes) { return max_over_ranks(world, double(bytes) / n) * kMiB; };
  const double measured = per_step(tp1.bytes() - tp0.bytes());
  const double analytic = per_step(n * (want.collectives.total() + want.p2p));
  const double all_reduce = per_step(moved.all_reduce), all_gather = per_step(moved.all_gather);
  const double reduce_scatter = per_step(moved.reduce_scatter), p2p = per_step(moved_p2p);
  const double dp_bytes = per_step(dp1.bytes() - dp0.bytes());
  const double step_ms = spread(over_ranks(world, step)).median * 1e3;
  const bench::Spread tp_s = spread(every_rank(world, spread(tp_seconds).median));
  const bench::Spread dp_s = spread(every_rank(world, spread(dp_seconds).median));
  const double peak = max_over_ranks(world, static_cast<double>(t.arena.peak())) * kMiB;
  if (world.rank() != 0) return ok;
  const bool tp = l.tp > 1, dp = l.dp > 1;
  auto ms = [](const bench::Spread& x) {
    return bench::spread_text({x.median * 1e3, x.min * 1e3, x.max * 1e3}, "%.0f");
  };
  std::printf("%-14s %2d %8.1f %7s %7s %6s %7s %7s %7s %7s %-14s %5s %7s %-14s %8.1f\n",
              l.name().c_str(), world.size(), step_ms, cell(tp, "%.2f", measured).c_str(),
              cell(tp, "%.2f", analytic).c_str(), cell(tp, "%.3f", measured / analytic).c_str(),
              cell(tp, "%.2f", all_reduce).c_str(), cell(tp, "%.2f", all_gather).c_str(),
              cell(tp, "%.2f", reduce_scatter).c_str(), cell(tp, "%.2f", p2p).c_str(),
              tp ? ms(tp_s).c_str() : "-", cell(tp, "%.0f%%", 1e5 * tp_s.median / step_ms).c_str(),
              cell(dp, "%.2f", dp_bytes).c_str(), dp ? ms(dp_s).c_str() : "-", peak);
  std::fflush(stdout);
  return ok;
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (const auto& [flag, value] :
       bench::parse_flags(argc, argv,
                          {"--config", "--rows", "--seq", "--optimizer", "--zero", "--warmup",
                           "--steps", "--header"})) {
    if (flag == "--config") s.config = value;
    else if (flag == "--optimizer") s.optimizer = value;
    else if (flag == "--rows") s.rows = std::stoll(value);
    else if (flag == "--seq") s.seq = std::stoll(value);
    else if (flag == "--zero") s.zero = std::stoi(value);
    else if (flag == "--warmup") s.warmup = std::stoi(value);
    else if (flag == "--steps") s.steps = std::stoi(value);
    else s.header = std::stoi(value) != 0;
  }
  return s;
}

void print_header(const Settings& s, const model::ModelConfig& c) {
  std::printf(
      "%s (vocab_size %lld), one micro-batch of %lld x %lld tokens per step, %s, ZeRO %d,\n"
      "buckets of 4 MiB, %d thread(s) per rank. Medians of %d steps after %d warm-up steps.\n",
      s.config.substr(s.config.rfind('/') + 1).c_str(), static_cast<long long>(c.vocab_size),
      static_cast<long long>(s.rows), static_cast<long long>(s.seq),
      s.optimizer == "muon" ? "Muon (K3's groups)" : "AdamW", s.zero, num_threads(), s.steps,
      s.warmup);
  std::printf(
      "step: the slowest rank's. tp MiB: one rank's payload over tp per step (the largest over "
      "ranks), measured and analytic,\nthen by operation (p2p: Muon's sends + receives). tp ms, "
      "dp ms: a rank's seconds blocked in the group's operations per\nstep, median [min-max] "
      "over ranks; share: the median / step. act MiB: the step arena's peak per "
      "rank.\n");
  std::printf("%-14s %2s %8s %7s %7s %6s %7s %7s %7s %7s %-14s %5s %7s %-14s %8s\n", "layout", "np",
              "step ms", "tp MiB", "anal", "ratio", "all-red", "all-gat", "red-sc", "p2p",
              "tp ms", "share", "dp MiB", "dp ms", "act MiB");
}

void run(const Settings& s) {
  const dist::Comm world = dist::Comm::world();
  const std::vector<Layout> todo = layouts(world.size());
  const model::ModelConfig c = model::load_model_config(s.config);
  if (world.rank() == 0 && s.header) print_header(s, c);
  int wrong = 0;
  for (const Layout& l : todo) wrong += !run_layout(s, c, world, l);
  world.all_reduce(&wrong, 1);
  if (wrong > 0)
    throw std::runtime_error("tp bytes measured differ from the analytic count (" +
                             std::to_string(wrong) + " rank-layouts)");
}

}  // namespace

int main(int argc, char** argv) {
  return bench::mpi_main(argc, argv, [](int argc, char** argv) { run(parse(argc, argv)); });
}
