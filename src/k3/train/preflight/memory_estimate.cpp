#include "k3/train/preflight/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "k3/base/format.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/pipeline/simulate.h"
#include "k3/train/config/parallel.h"
#include "k3/train/loop/activations.h"

namespace k3::train {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kUnlimited = std::numeric_limits<double>::infinity();

// Muon keeps, beside each matrix's momentum, the Nesterov inputs of a chunk of equally shaped
// blocks and its orthogonalized result (pack and out: count·r·c floats each, count as many blocks
// as fit 256 MiB, at least one) and Newton-Schulz's scratch (4·count·m², m = min(r, c)). Each
// buffer grows to the largest chunk of any shape and stays: optim/muon.cpp, newton_schulz.cpp.
double muon_workspace_bytes(const std::vector<optim::Assignment>& plan) {
  constexpr double kChunkBytes = 256.0 * 1024 * 1024;
  std::map<std::pair<int64_t, int64_t>, double> blocks;  // (rows, cols) -> blocks of that shape
  for (const optim::Assignment& a : plan)
    if (a.optimizer == optim::OptimizerKind::muon)
      blocks[{a.block_shape[0], a.block_shape[1]}] += static_cast<double>(a.blocks());
  double pack = 0, scratch = 0;
  for (auto& [shape, count] : blocks) {
    const double r = static_cast<double>(shape.first), c = static_cast<double>(shape.second);
    const double chunk =
        std::min(count, std::max(1.0, std::floor(kChunkBytes / (2 * r * c * sizeof(float)))));
    pack = std::max(pack, chunk * r * c);
    scratch = std::max(scratch, 4 * chunk * std::min(r, c) * std::min(r, c));
  }
  return (2 * pack + scratch) * sizeof(float);
}

// "MemAvailable:  123456 kB" from /proc/meminfo, in bytes.
double available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return kUnlimited;
}

// What the cgroup (v2) limit leaves: memory.max less memory.current; unlimited when not set.
double cgroup_room() {
  std::ifstream max_in("/sys/fs/cgroup/memory.max"), current_in("/sys/fs/cgroup/memory.current");
  std::string max_text;
  double current = 0;
  if (!(max_in >> max_text) || max_text == "max") return kUnlimited;
  current_in >> current;
  return std::max(0.0, std::stod(max_text) - current);
}

// The micro-batch chunks pipeline rank RANK holds at once under SHAPE (Timeline::peak_in_flight).
// A planner's search estimates hundreds of layouts on a few dozen schedules: each is made and
// run on paper once, for all its ranks.
int peak_in_flight(const parallel::pipeline::ScheduleShape& shape, int rank) {
  const auto key = std::make_tuple(shape.kind, shape.pp, shape.vp, shape.microbatches, shape.group,
                                   shape.fillers, shape.costs.forward, shape.costs.backward_input,
                                   shape.costs.backward_weight, shape.costs.filler);
  static std::mutex mutex;
  static std::map<std::remove_const_t<decltype(key)>, std::vector<int>> known;  // by rank
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second[static_cast<size_t>(rank)];
  }
  const parallel::pipeline::Timeline t =
      parallel::pipeline::simulate(parallel::pipeline::make_schedule(shape));
  std::vector<int> peaks;
  for (int r = 0; r < shape.pp; ++r) peaks.push_back(t.peak_in_flight(r));
  const std::lock_guard<std::mutex> lock(mutex);
  return known.emplace(key, std::move(peaks)).first->second[static_cast<size_t>(rank)];
}

int64_t layers_held(const model::ActivationLayout& l) {
  int64_t n = 0;
  for (auto [first, end] : l.chunks) n += end - first;
  return n;
}

}  // namespace

double RunMemory::total() const {
  return model.parameter_bytes + model.gradient_bytes + model.activation_bytes +
         model.balancing_bytes + optimizer_state + optimizer_workspace + data;
}

std::vector<optim::Assignment> optimizer_plan(const std::vector<optim::ParamSlot>& slots,
                                              const model::ModelConfig& mc,
                                              const TrainSection& train) {
  std::vector<std::string> rules = optim::split_rules(train.optim_rules);
  const std::vector<std::string>& extra = train.optimizer == "adamw" ? optim::adamw_only_rules()
                                          : !train.muon_per_head ? optim::whole_matrix_muon_rules()
                                                                 : std::vector<std::string>{};
  rules.insert(rules.end(), extra.begin(), extra.end());
  return optim::assign_param_groups(slots, parallel::head_sizes(mc), rules);
}

parallel::pipeline::ScheduleShape schedule_shape(const RunConfig& config,
                                                 const model::ModelConfig& mc) {
  const ParallelSection& p = config.parallel;
  const model::PipelineSplit split = pipeline_split(p, mc.num_hidden_layers);
  parallel::pipeline::ScheduleShape shape;
  shape.kind = pipeline_schedule(p);
  shape.pp = split.pp;
  shape.vp = split.vp;
  shape.microbatches = static_cast<int>(config.train.grad_accum);
  shape.group = static_cast<int>(p.pp_group);
  shape.fillers = mc.has_vision() ? pipeline_fillers(p) : parallel::pipeline::Fillers::none;
  return shape;
}

model::ActivationLayout activation_layout(const RunConfig& config, const model::ModelConfig& mc,
                                          int pp_rank) {
  const ParallelSection& p = config.parallel;
  model::ActivationLayout l;
  l.rows = std::max<int64_t>(1, config.train.batch_size / (p.dp * p.ep));
  l.tokens = config.data.seq_len / p.cp;
  l.cp = static_cast<int>(p.cp);
  l.tp = static_cast<int>(p.tp);
  l.sequence_parallel = p.sequence_parallel && p.tp > 1;
  l.ep = static_cast<int>(p.ep);
  l.moonep = p.moe_dispatch == "moonep";
  l.replica_slots = p.moonep_slots;
  l.chunks = {{0, mc.num_hidden_layers}};
  if (p.pp > 1) {
    l.chunks.clear();
    const model::PipelineSplit split = pipeline_split(p, mc.num_hidden_layers);
    for (int chunk = 0; chunk < split.vp; ++chunk) {
      const int stage = split.pp * chunk + pp_rank;
      const int64_t first = split.first_layer(stage);
      l.chunks.push_back({first, first + split.layers[static_cast<size_t>(stage)]});
    }
    l.in_flight = peak_in_flight(schedule_shape(config, mc), pp_rank);
  }
  // Rules may hold some tensors longer than the default policy: the estimate takes the most
  // holding of them all (keep, then bf16, fp8, then offload and recompute).
  const activation::PolicyRules rules = activation_rules(config.activation);
  auto rank = [](activation::Policy q) {
    return q == activation::Policy::Keep      ? 4
           : q == activation::Policy::Bf16    ? 3
           : q == activation::Policy::Fp8     ? 2
           : q == activation::Policy::Offload ? 1
                                              : 0;
  };
  l.policy = rules.fallback();
  for (const activation::PolicyRule& r : rules.rules())
    if (rank(r.policy) > rank(l.policy)) l.policy = r.policy;
  l.granularity = activation_granularity(config.activation);
  if (!config.activation.budget.empty())
    l.budget = parse_bytes(config.activation.budget).value_or(0);
  return l;
}

RunMemory estimate_run_memory(const model::Model& described, const RunConfig& config,
                              int64_t data_tokens) {
  RunMemory m;
  // Per rank: its share of the batch (and under context parallelism of each sequence's tokens),
  // its pipeline stages with the micro-batches the schedule holds there, the activation policy,
  // and with ZeRO its share of the optimizer states.
  const int64_t dp = config.parallel.dp;
  m.pp_rank = described.params().place("pp").rank;
  m.layout = activation_layout(config, described.config(), m.pp_rank);
  m.model = model::model_memory(described, m.layout);
  const ParallelSection& p = config.parallel;
  m.layout_text = strprintf(
      "dp %lld, tp %lld, pp %lld (rank %d), ep %lld%s, cp %lld; activation "
      "policy %s (%s)%s",
      static_cast<long long>(dp), static_cast<long long>(p.tp), static_cast<long long>(p.pp),
      m.pp_rank, static_cast<long long>(p.ep), p.ep > 1 ? (" " + p.moe_dispatch).c_str() : "",
      static_cast<long long>(p.cp), activation::policy_name(m.layout.policy),
      config.activation.granularity.c_str(),
      m.layout.budget > 0 ? (", budget " + config.activation.budget).c_str() : "");
  const std::vector<optim::Assignment> plan = optimizer_plan(
      parallel::param_set(described.params()).slots, described.config(), config.train);
  for (const optim::Assignment& a : plan) {
    const int64_t n = shape_numel(a.shape);
    (a.optimizer == optim::OptimizerKind::adamw  ? m.adamw_values
     : a.optimizer == optim::OptimizerKind::muon ? m.muon_values
                                                 : m.frozen_values) += n;
  }
  m.optimizer_state =
      (2 * static_cast<double>(m.adamw_values) + static_cast<double>(m.muon_values)) *
      sizeof(float) / static_cast<double>(config.parallel.zero > 0 ? dp : 1);
  m.optimizer_workspace = muon_workspace_bytes(plan);
  m.data = static_cast<double>(data_tokens) * sizeof(int32_t);
  return m;
}

MemoryLimit memory_limit(double limit_gib) {
  MemoryLimit limit{available_memory(), "MemAvailable"};
  if (const double room = cgroup_room(); room < limit.bytes) limit = {room, "cgroup memory.max"};
  if (limit_gib > 0 && limit_gib * kGiB < limit.bytes)
    limit = {limit_gib * kGiB, strprintf("run.memory_limit_gib = %g", limit_gib)};
  return limit;
}

std::string describe(const RunMemory& m) {
  auto line = [](const char* part, double bytes, const std::string& detail) {
    return strprintf("  %-20s %12s  %s\n", part, format_bytes(bytes).c_str(), detail.c_str());
  };
  return line("parameters", m.model.parameter_bytes,
              strprintf("%lld values, fp32", static_cast<long long>(m.model.parameters))) +
         line("gradients", m.model.gradient_bytes, "fp32, the parameters' layout") +
         line("optimizer state", m.optimizer_state,
              strprintf("AdamW m + v for %lld values, Muon momentum for %lld (%lld frozen)",
                        static_cast<long long>(m.adamw_values),
                        static_cast<long long>(m.muon_values),
                        static_cast<long long>(m.frozen_values))) +
         line("optimizer scratch", m.optimizer_workspace,
              "Muon's packed blocks and Newton-Schulz work") +
         line("activations", m.model.activation_bytes,
              strprintf("%d micro-batch%s of %lld x %lld tokens in flight, %lld layers, at most",
                        m.layout.in_flight, m.layout.in_flight == 1 ? "" : "es",
                        static_cast<long long>(m.layout.rows),
                        static_cast<long long>(m.layout.tokens),
                        static_cast<long long>(layers_held(m.layout)))) +
         line("expert balancing", m.model.balancing_bytes,
              "the MoE layers' balancer counts (expert loads, histograms)") +
         line("data", m.data, "token streams, int32") + line("total", m.total(), "") +
         "  layout: " + m.layout_text + "\n";
}

}  // namespace k3::train
