// Expert parallelism, baseline all-to-all against MoonEP, on one MoE layer's routed experts
// (k3-small's: 32 experts, top 4, F = L = 256) under mpirun: for each routing, the rows each rank
// computes (max and mean over ranks, and their ratio: the load spread), the replica slots used,
// the time of the routed experts' forward and backward (dispatch, expert GEMMs, combine: what the
// two modes do differently; the slowest rank's, median of the timed steps), and the bytes a rank
// sends over ep per step, measured (dist::Counters) beside the analytic count from the loads
// and the plan. A count that differs makes the bench exit non-zero.
//
// Routings: each rank draws, for each of its S tokens, K distinct experts with probability
// ∝ w(e): Zipf w(e) = 1 / (e + 1)^a, the hot experts on the first ranks (the hard case for the
// baseline); and, with --recorded FILE (expert_load.jsonl of a k3-small run,
// bench/expert_parallel.sh trains one), w = the per-expert loads of each recorded layer, as
// that router routed them.
//
//   bench_expert_parallel [--tokens S] [--slots R] [--warmup N] [--steps N] [--recorded FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flags.h"
#include "k3/base/timer.h"
#include "k3/model/experts/routed_experts.h"
#include "k3/train/observe/expert_load.h"
#include "spread.h"
#include "trainee.h"

namespace {

using namespace k3;

struct Settings {
  std::string config = std::string(K3_BENCH_DIR) + "/../configs/k3-small.json";
  int64_t tokens = 512;  // S per rank
  int slots = 2;
  int warmup = 2, steps = 10;
  std::string recorded;
};

struct Routing {
  std::string name;
  std::vector<double> weight;  // per expert
};

// Each token's K distinct experts, drawn one after the other ∝ weight among those left.
std::vector<float> draw_ids(const std::vector<double>& weight, int64_t tokens, int64_t k,
                            unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> ids;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> w = weight;
    for (int64_t j = 0; j < k; ++j) {
      std::discrete_distribution<int> pick(w.begin(), w.end());
      const int e = pick(rng);
      ids.push_back(static_cast<float>(e));
      w[static_cast<size_t>(e)] = 0;
    }
  }
  return ids;
}

// This rank's bytes over ep in one forward and backward, from the loads and the plan alone:
// the load exchange (E counts by all-to-all, or every rank's E by all-gather), the rows sent and
// computed (each crossing twice in forward, twice in backward), the replica weights this rank
// sends as home and the replica gradients it sends back as host.
int64_t analytic_bytes(const model::MoonEpShape& shape, const std::vector<int64_t>& loads,
                       bool moonep, int rank, int64_t L, int64_t weight_floats) {
  const int P = shape.ranks, E = shape.experts, per = E / P;
  std::vector<int64_t> total(static_cast<size_t>(E), 0);
  for (int s = 0; s < P; ++s)
    for (int e = 0; e < E; ++e) total[e] += loads[static_cast<size_t>(s * E + e)];
  int64_t computed = 0, replicas_in = 0, replicas_out = 0;
  if (moonep) {
    const model::MoonEpPlan plan = model::plan_moonep(shape, total);
    computed = plan.rows[rank];
    replicas_in = plan.replicas[rank];
    for (int e = rank * per; e < (rank + 1) * per; ++e)
      replicas_out += static_cast<int64_t>(plan.hosts[e].size()) - 1;
  } else {
    for (int e = rank * per; e < (rank + 1) * per; ++e) computed += total[e];
  }
  return 8 * (moonep ? int64_t{P} * E : E) + 8 * L * (shape.rows_per_rank + computed) +
         4 * weight_floats * (replicas_in + replicas_out);
}

struct Result {
  double maxvio = 0, rows_max = 0, rows_mean = 0, replicas = 0;
  bench::Spread ms;
  int64_t bytes = 0, analytic = 0;
};

Result run(const Settings& s, const model::ModelConfig& c, const dist::ProcessGrid& grid,
           const Routing& r) {
  const dist::Comm& world = grid.world();
  const dist::Comm& ep = grid.ep();
  model::ParamRegistry reg(model::places_of(grid));
  const model::RoutedExperts experts(reg, "bench.moe", c);
  reg.allocate();
  reg.initialize(1);
  Arena arena(size_t{1} << 30, false);
  activation::ActivationManager acts;
  const model::Step step{arena, acts, reg, true, grid};
  const int64_t S = s.tokens, K = c.num_experts_per_token, L = c.expert_dim();
  const std::vector<float> ids =
      draw_ids(r.weight, S, K, 17u + static_cast<unsigned>(world.rank()));
  std::vector<float> z(static_cast<size_t>(S * L)), dy(static_cast<size_t>(S * K * L));
  std::mt19937 rng(5u + static_cast<unsigned>(world.rank()));
  std::normal_distribution<float> n01;
  for (float& v : z) v = n01(rng);
  for (float& v : dy) v = n01(rng);

  // Loads over the group, for maxvio and the analytic count.
  std::vector<int64_t> loads(static_cast<size_t>(ep.size() * c.num_experts), 0);
  for (float id : ids)
    ++loads[static_cast<size_t>(ep.rank() * c.num_experts + static_cast<int>(id))];
  ep.all_gather(loads.data(), std::vector<int64_t>(static_cast<size_t>(ep.size()), c.num_experts));
  std::vector<int64_t> total(static_cast<size_t>(c.num_experts), 0);
  for (size_t i = 0; i < loads.size(); ++i) total[i % total.size()] += loads[i];
  const model::MoonEpShape shape{ep.size(), static_cast<int>(c.num_experts),
                                 grid.dims().moonep ? grid.dims().moonep_slots : 0, S * K};
  const int64_t weight_floats = 3 * c.moe_intermediate_size * L;

  std::vector<double> ms;
  int64_t bytes = 0;
  for (int i = 0; i < s.warmup + s.steps; ++i) {
    world.barrier();
    const int64_t before = ep.counters().bytes();
    Timer t;
    {
      ArenaScope scope(arena);
      float *y = step.alloc(S * K * L), *dz = step.alloc(S * L);
      experts.forward(step, ids.data(), S, z.data(), y);
      const kernels::MoePermutePlan plan = model::plan_rows(arena, ids.data(), S, K, c.num_experts);
      experts.backward(step, plan, dy.data(), dz);
      acts.release(0);
    }
    const double mine = t.seconds() * 1e3;
    bytes = ep.counters().bytes() - before;
    if (i >= s.warmup) ms.push_back(bench::max_over_ranks(world, mine));
  }
  const model::DispatchStats d = experts.take_stats(ep);
  Result out;
  out.maxvio = model::maxvio(total);
  for (int64_t rows : d.rows) {
    out.rows_max = std::max(out.rows_max, static_cast<double>(rows));
    out.rows_mean += static_cast<double>(rows) / static_cast<double>(d.rows.size());
  }
  const double per_step = s.warmup + s.steps;
  out.rows_max /= per_step;
  out.rows_mean /= per_step;
  out.replicas = static_cast<double>(d.replicas) / per_step;
  out.ms = bench::spread(ms);
  out.bytes = bytes;
  out.analytic = analytic_bytes(shape, loads, grid.dims().moonep, ep.rank(), L, weight_floats);
  return out;
}

std::vector<Routing> routings(const Settings& s, int64_t experts) {
  std::vector<Routing> out;
  for (double a : {0.0, 0.8, 1.2, 1.6}) {
    Routing r{"zipf a=" + std::to_string(a).substr(0, 3), {}};
    for (int64_t e = 0; e < experts; ++e) r.weight.push_back(1.0 / std::pow(e + 1.0, a));
    out.push_back(std::move(r));
  }
  if (s.recorded.empty()) return out;
  const auto records = train::read_expert_load(s.recorded);
  if (records.empty()) throw std::runtime_error(s.recorded + ": no records");
  for (const auto& [layer, st] : records.back().layers) {
    if (static_cast<int64_t>(st.load.size()) != experts)
      throw std::runtime_error(s.recorded + ": layer " + std::to_string(layer) + " has " +
                               std::to_string(st.load.size()) + " experts");
    Routing r{"k3-small layer " + std::to_string(layer), {}};
    for (int64_t l : st.load) r.weight.push_back(static_cast<double>(l) + 0.5);
    out.push_back(std::move(r));
  }
  return out;
}

void bench_main(int argc, char** argv) {
  Settings s;
  const auto flags = bench::parse_flags(
      argc, argv, {"--tokens", "--slots", "--warmup", "--steps", "--recorded", "--config"});
  if (flags.count("--tokens")) s.tokens = std::stoll(flags.at("--tokens"));
  if (flags.count("--slots")) s.slots = std::stoi(flags.at("--slots"));
  if (flags.count("--warmup")) s.warmup = std::stoi(flags.at("--warmup"));
  if (flags.count("--steps")) s.steps = std::stoi(flags.at("--steps"));
  if (flags.count("--recorded")) s.recorded = flags.at("--recorded");
  if (flags.count("--config")) s.config = flags.at("--config");
  const dist::Comm world = dist::Comm::world();
  if (world.size() < 2) throw std::runtime_error("run under mpirun -np 2 or more");
  const model::ModelConfig c = model::load_model_config(s.config);
  const dist::ProcessGrid base(dist::ParallelDims{.ep = world.size()}, world),
      moon(dist::ParallelDims{.ep = world.size(), .moonep = true, .moonep_slots = s.slots}, world);
  int32_t differ = 0;
  if (world.rank() == 0)
    std::printf(
        "ep%d, %lld experts top %lld, S = %lld tokens a rank (S·K = %lld rows), R = %d slots, "
        "1 thread a rank, median [range] of %d steps\n"
        "| routing | maxvio | dispatch | rows/rank max / mean | spread | replicas | "
        "fwd+bwd ms | MiB/step sent, measured / analytic |\n|---|---|---|---|---|---|---|---|\n",
        world.size(), static_cast<long long>(c.num_experts),
        static_cast<long long>(c.num_experts_per_token), static_cast<long long>(s.tokens),
        static_cast<long long>(s.tokens * c.num_experts_per_token), s.slots, s.steps);
  for (const Routing& r : routings(s, c.num_experts))
    for (const dist::ProcessGrid* g : {&base, &moon}) {
      const Result x = run(s, c, *g, r);
      differ += x.bytes != x.analytic;
      const double meas = bench::max_over_ranks(world, static_cast<double>(x.bytes));
      const double anal = bench::max_over_ranks(world, static_cast<double>(x.analytic));
      if (world.rank() == 0)
        std::printf("| %s | %.2f | %s | %.0f / %.0f | %.2f | %.1f | %s | %.3f / %.3f |\n",
                    r.name.c_str(), x.maxvio, g->dims().moonep ? "MoonEP" : "all-to-all",
                    x.rows_max, x.rows_mean, x.rows_max / x.rows_mean, x.replicas,
                    bench::spread_text(x.ms, "%.1f").c_str(), meas / (1 << 20), anal / (1 << 20));
    }
  world.all_reduce(&differ, 1);
  if (differ) throw std::runtime_error("bytes over ep differ from the analytic count");
}

}  // namespace

int main(int argc, char** argv) { return k3::bench::mpi_main(argc, argv, bench_main); }
