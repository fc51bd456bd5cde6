// Data parallelism (parallel::ParallelStep) under mpirun: for ZeRO 0, 1, 2 × AdamW, Muon, the
// step time and the exposed gradient-reduction wait with the reduction overlapped with the
// backward and without, the bytes a step moves over dp against the analytic count, and Muon's
// per-rank working memory. A plain main (not Google Benchmark); bench/distributed.sh runs it at
// several rank counts and prints the header once.
//
// Per layout, two models train side by side, one with overlap on and one with it off, their
// steps alternating (on, off, on, ...) so the host's drifting load falls on both alike. Every
// step starts after a barrier; its time is the slowest rank's (forward, backward, reduction and
// optimizer step), its wait the shortest GradSync::wait_seconds of any rank: the rank whose
// backward ends last waits only for the communication, the others wait for it too. With overlap
// off every bucket starts after the backward, so that wait is the whole reduction time (less what
// the calls that start the collectives do before returning: GradSync's clock starts after them),
// and hidden = 1 − wait(on) / wait(off) is the fraction of it the backward covered. Bytes: what
// this rank handed to the dp group's operations per timed step (dist/comm.h's payloads), against
//   token count 8 + loss 8 (+ ZeRO-2 norm 8) + gradients 4F (+ ZeRO ≥ 1: all-gather 4F + Muon p2p),
// F = the flat parameter buffer's floats; both the largest over ranks.
//
//   bench_distributed [--config PATH] [--rows N] [--seq T] [--micro M] [--bucket-mib X]
//                     [--warmup N] [--steps N] [--header 0|1]
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/timer.h"
#include "spread.h"
#include "trainee.h"

namespace {

using namespace k3;
using bench::Batch;
using bench::max_over_ranks;
using bench::over_ranks;
using bench::spread;
using bench::Trainee;

struct Settings {
  std::string config = std::string(K3_BENCH_DIR) + "/../configs/k3-micro.json";
  int64_t rows = 8, seq = 64, micro = 2;
  double bucket_mib = 0.25;
  int warmup = 2, steps = 8;
  bool header = true;
};

// This rank's bytes over dp in one step, analytically.
int64_t analytic_bytes(Trainee& t, int zero) {
  const int64_t grads = 4 * static_cast<int64_t>(t.model.params().flat_size());
  const parallel::DistributedMuon* muon = t.dp.optimizer().distributed_muon();
  return 8 * (zero == 2 ? 3 : 2) + grads * (zero >= 1 ? 2 : 1) +
         (muon ? muon->expected_p2p_bytes() : 0);
}

// Per rank, per timed step: step seconds and wait seconds; bytes over the timed steps.
struct Record {
  std::vector<double> step, wait;
  int64_t bytes = 0;
};

void run_layout(const Settings& s, const model::ModelConfig& c, const dist::ProcessGrid& grid,
                int zero, const std::string& optimizer) {
  const dist::Comm& world = grid.world();
  const size_t bucket = static_cast<size_t>(s.bucket_mib * 1024 * 1024 / sizeof(float));
  Trainee on(c, grid, optimizer, {.zero = zero, .bucket_floats = bucket, .overlap = true});
  Trainee off(c, grid, optimizer, {.zero = zero, .bucket_floats = bucket, .overlap = false});
  const Batch batch(s.micro, s.rows, s.seq, c.vocab_size);
  Record rec[2];  // on, off
  for (int i = 0; i < s.warmup + s.steps; ++i) {
    for (int mode = 0; mode < 2; ++mode) {
      Trainee& t = mode == 0 ? on : off;
      const std::vector<model::TokenBatch> share =
          batch.share(t.dp.first_row(s.rows), t.dp.rows(s.rows));
      world.barrier();
      const int64_t before = grid.dp().counters().bytes();
      const Timer timer;
      t.dp.forward_backward(t.arena, t.acts, share);
      t.dp.apply(1e-3f, 1.0f);
      const double seconds = timer.seconds();
      if (i < s.warmup) continue;
      rec[mode].step.push_back(seconds);
      rec[mode].wait.push_back(t.dp.sync().wait_seconds());
      rec[mode].bytes += grid.dp().counters().bytes() - before;
    }
  }
  double median_step[2], median_wait[2];
  std::vector<double> step_max[2];
  for (int mode = 0; mode < 2; ++mode) {
    step_max[mode] = over_ranks(world, rec[mode].step);
    median_step[mode] = spread(step_max[mode]).median;
    median_wait[mode] = spread(over_ranks(world, rec[mode].wait, false)).median;
  }
  std::vector<double> pair_ratio;  // off / on, per neighbouring pair of steps
  for (size_t i = 0; i < step_max[0].size(); ++i)
    pair_ratio.push_back(step_max[1][i] / step_max[0][i]);
  // Bytes: the same count in both modes; the larger of the two, the largest over ranks.
  const double measured =
      max_over_ranks(world, static_cast<double>(std::max(rec[0].bytes, rec[1].bytes)) / s.steps);
  const double analytic = max_over_ranks(world, static_cast<double>(analytic_bytes(on, zero)));
  const parallel::MuonTraffic muon = on.dp.optimizer().muon_traffic();
  const double work = max_over_ranks(
      world,
      static_cast<double>(muon.x_buffer_bytes + muon.unit_buffer_bytes + muon.workspace_bytes));
  const double gathered = max_over_ranks(world, static_cast<double>(muon.all_gather_bytes));
  const double state = max_over_ranks(world, static_cast<double>(on.dp.optimizer().state_bytes()));
  if (world.rank() != 0) return;
  const double mb = 1.0 / (1 << 20);
  std::string muon_text = "           -           -";
  if (optimizer == "muon" && zero >= 1) {
    char text[64];
    std::snprintf(text, sizeof text, " %11.2f %11.2f", work * mb, gathered * mb);
    muon_text = text;
  }
  std::printf("%3d %5d %-6s %8.1f %8.1f %-17s %8.2f %8.2f %7.0f%% %9.3f %9.3f %6.3f %9.2f%s\n",
              world.size(), zero, optimizer.c_str(), median_step[0] * 1e3, median_step[1] * 1e3,
              bench::spread_text(spread(pair_ratio), "%.2f").c_str(), median_wait[0] * 1e3,
              median_wait[1] * 1e3, 100 * (1 - median_wait[0] / median_wait[1]), measured * mb,
              analytic * mb, measured / analytic, state * mb, muon_text.c_str());
  std::fflush(stdout);
}

Settings parse(int argc, char** argv) {
  const auto flags = bench::parse_flags(argc, argv,
                                        {"--config", "--rows", "--seq", "--micro", "--bucket-mib",
                                         "--warmup", "--steps", "--header"});
  auto number = [&](const char* flag, double fallback) {
    return flags.count(flag) ? std::stod(flags.at(flag)) : fallback;
  };
  Settings s;
  if (flags.count("--config")) s.config = flags.at("--config");
  s.rows = static_cast<int64_t>(number("--rows", s.rows));
  s.seq = static_cast<int64_t>(number("--seq", s.seq));
  s.micro = static_cast<int64_t>(number("--micro", s.micro));
  s.bucket_mib = number("--bucket-mib", s.bucket_mib);
  s.warmup = static_cast<int>(number("--warmup", s.warmup));
  s.steps = static_cast<int>(number("--steps", s.steps));
  s.header = number("--header", 1) != 0;
  return s;
}

void run(const Settings& s) {
  const dist::Comm world = dist::Comm::world();
  if (world.size() < 2)
    throw std::runtime_error("run under mpirun with 2 or more ranks (bench/distributed.sh)");
  const dist::ProcessGrid grid(dist::ParallelDims{.dp = world.size()}, world);
  const model::ModelConfig c = model::load_model_config(s.config);
  if (world.rank() == 0 && s.header) {
    const model::Model probe(c, false);
    std::printf(
        "%s (F = %lld floats), global batch %lld micro-batches x %lld rows x %lld tokens, "
        "buckets of %.2f MiB, "
        "%d thread(s) per rank.\n",
        s.config.substr(s.config.rfind('/') + 1).c_str(),
        static_cast<long long>(probe.params().flat_size()), static_cast<long long>(s.micro),
        static_cast<long long>(s.rows), static_cast<long long>(s.seq), s.bucket_mib, num_threads());
    std::printf(
        "Medians of %d steps after %d warm-up steps; per layout the two overlap modes alternate "
        "step by step.\n"
        "step: the slowest rank's; off/on: per pair of neighbouring steps, median [range].\n"
        "wait: the reduction wait after the backward, the shortest over ranks (the last rank to "
        "end its "
        "backward waits for no other).\n"
        "With overlap off the wait is the whole reduction time, so hidden = 1 - wait(on) / "
        "wait(off).\n"
        "MiB meas/anal: one rank's payload over dp per step (the largest over ranks), measured "
        "and analytic.\n"
        "state: optimizer state per rank. Muon work: X + Newton-Schulz workspace per rank; "
        "gather: the "
        "buffer of gathering every\nMuon matrix on every rank instead (which needs the workspace "
        "too).\n",
        s.steps, s.warmup);
    std::printf("%3s %5s %-6s %8s %8s %-17s %8s %8s %8s %9s %9s %6s %9s %11s %11s\n", "np", "zero",
                "optim", "step on", "step off", "off/on [range]", "wait on", "wait off", "hidden",
                "MiB meas", "MiB anal", "ratio", "state MiB", "Muon work", "gather MiB");
    std::printf("%3s %5s %-6s %8s %8s %-17s %8s %8s %8s\n", "", "", "", "ms", "ms", "", "ms", "ms",
                "");
  }
  for (const char* optimizer : {"adamw", "muon"})
    for (int zero = 0; zero <= 2; ++zero) run_layout(s, c, grid, zero, optimizer);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::mpi_main(argc, argv, [](int argc, char** argv) { run(parse(argc, argv)); });
}
