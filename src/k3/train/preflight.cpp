#include "k3/train/preflight.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/threads.h"
#include "k3/data/batcher.h"
#include "k3/dist/runtime.h"
#include "k3/model/layer_factory.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/pipeline/simulate.h"
#include "k3/train/activations.h"
#include "k3/train/curriculum.h"
#include "k3/train/image_text_data.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;

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

// Tokens the dataset will hold, known before it loads: the built-in corpus's size (whole
// documents run a little past it), else one token per byte of text (the byte tokenizer) and an
// end-of-document token per file and split.
int64_t expected_tokens(const DataSection& d) {
  if (d.source == "builtin") return d.builtin_tokens;
  if (d.source == kImageTextSource) return 0;  // drawn batch by batch
  std::error_code ec;
  int64_t tokens = 2;
  auto add = [&](const fs::path& p) {
    const auto size = fs::file_size(p, ec);
    if (!ec) tokens += static_cast<int64_t>(size) + 1;
  };
  if (fs::is_directory(d.source, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(d.source, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".txt") add(e.path());
  } else {
    add(d.source);
  }
  return tokens;
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

void check_memory(const RunMemory& m, const MemoryLimit& limit, const RunConfig& c) {
  const double acts = m.model.activation_bytes;
  K3_CHECK_CTX(acts <= static_cast<double>(kStepArenaReserve),
               (ErrorContext{"", "train.batch_size", -1}), "one micro-batch of train.batch_size ",
               c.train.batch_size, " x data.seq_len ", c.data.seq_len, " needs an estimated ",
               format_bytes(acts), " of activations, more than the step arena's ",
               format_bytes(static_cast<double>(kStepArenaReserve)),
               ": lower train.batch_size (raise train.grad_accum)");
  const bool set_limit = limit.source.rfind("run.memory_limit_gib", 0) == 0;
  K3_CHECK_CTX(
      m.total() <= limit.bytes, (ErrorContext{"", set_limit ? "run.memory_limit_gib" : "", -1}),
      "the run needs an estimated ", format_bytes(m.total()), " (parameters ",
      format_bytes(m.model.parameter_bytes), ", gradients ", format_bytes(m.model.gradient_bytes),
      ", optimizer ", format_bytes(m.optimizer_state + m.optimizer_workspace), ", activations ",
      format_bytes(acts), " for train.batch_size ", c.train.batch_size, " x data.seq_len ",
      c.data.seq_len, ", data ", format_bytes(m.data), "), more than the ",
      format_bytes(limit.bytes), " of ", limit.source, ": use a smaller model, batch or sequence");
}

// The batcher serves windows of seq_len + 1 tokens; one batch takes batch_size of them.
void check_splits(const data::TokenDataset& ds, const RunConfig& c) {
  if (image_text_source(c)) return;  // the corpus never runs out
  const int64_t T = c.data.seq_len, B = c.train.batch_size, window = T + 1;
  const int64_t train_tokens = ds.train_tokens().size();
  const int64_t windows =
      train_tokens >= window ? data::Batcher(ds.train_tokens(), B, T, 0).windows_per_epoch() : 0;
  K3_CHECK_CTX(windows >= B, (ErrorContext{"", "train.batch_size", -1}), "the training split of ",
               train_tokens, " tokens holds ", windows, " windows of data.seq_len + 1 = ", window,
               " tokens, fewer than one batch of train.batch_size = ", B,
               ": use more data or a smaller train.batch_size or data.seq_len");
  if (c.eval.every == 0) return;
  const int64_t val_tokens = ds.validation_tokens().size();
  // Shards carry their own split, made by `k3lab data prepare --val-fraction`.
  K3_CHECK_CTX(!ds.shards || val_tokens >= window, (ErrorContext{"", "data.path", -1}),
               "the shards' validation split of ", val_tokens,
               " tokens cannot hold one evaluation window of data.seq_len + 1 = ", window,
               " tokens: prepare them with a larger --val-fraction, lower data.seq_len, or set "
               "eval.every = 0");
  K3_CHECK_CTX(
      val_tokens >= window, (ErrorContext{"", "data.val_fraction", -1}), "the validation split of ",
      val_tokens, " tokens (data.val_fraction = ", c.data.val_fraction,
      ") cannot hold one evaluation window of data.seq_len + 1 = ", window,
      " tokens (train.batch_size = ", B,
      " windows per batch): raise data.val_fraction, lower data.seq_len, or set eval.every = 0");
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
  if (train.optimizer == "adamw")
    rules.insert(rules.end(), optim::adamw_only_rules().begin(), optim::adamw_only_rules().end());
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
    l.in_flight =
        parallel::pipeline::simulate(parallel::pipeline::make_schedule(schedule_shape(config, mc)))
            .peak_in_flight(pp_rank);
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

void check_parallel(const ParallelSection& p, const TrainSection& train, int64_t seq_len,
                    int world_size) {
  const int64_t product = p.dp * p.tp * p.pp * p.ep * p.cp;
  K3_CHECK_CTX(product == world_size, (ErrorContext{"", "parallel", -1}), "dp·tp·pp·ep·cp = ", p.dp,
               "·", p.tp, "·", p.pp, "·", p.ep, "·", p.cp, " = ", product, " but the job has ",
               world_size, " process", world_size == 1 ? "" : "es",
               world_size == 1 ? " (start it with mpirun -np N, or set parallel.dp=1)" : "");
  K3_CHECK_CTX(p.pp > 1 || p.vp == 1, (ErrorContext{"", "parallel.vp", -1}),
               "virtual stages (parallel.vp = ", p.vp,
               ") need pipeline parallelism (parallel.pp > 1)");
  K3_CHECK_CTX(p.cp == 1 || seq_len % (2 * p.cp) == 0, (ErrorContext{"", "data.seq_len", -1}),
               "context parallelism cuts each sequence into 2·cp = ", 2 * p.cp,
               " zig-zag chunks: ", seq_len, " tokens do not split evenly");
  // The ep ranks are carved out of the data-parallel ones: each reads its own sequences.
  const int64_t readers = p.dp * p.ep;
  K3_CHECK_CTX(train.batch_size % readers == 0, (ErrorContext{"", "train.batch_size", -1}),
               "the global batch of ", train.batch_size,
               " sequences does not split over dp·ep = ", readers, " ranks: use a multiple of ",
               readers);
  const int64_t tokens = train.batch_size / readers * seq_len / p.cp;
  K3_CHECK_CTX(!p.sequence_parallel || tokens % p.tp == 0, (ErrorContext{"", "data.seq_len", -1}),
               "sequence parallelism splits each rank's ", tokens,
               " tokens per micro-batch (batch_size / (dp·ep) · seq_len / cp) over tp = ", p.tp,
               ": they do not split evenly");
}

// Under pipeline parallelism: the layers split into pp·vp stages, the schedule takes the step's
// micro-batches (train.grad_accum), and samples fall on checkpoint steps (decoding needs every
// layer on one rank, so the lead decodes the checkpoint).
void check_pipeline(const RunConfig& config, const model::ModelConfig& mc) {
  const ParallelSection& p = config.parallel;
  if (p.pp == 1) return;
  // The split first: its errors name parallel.pp_layers, the schedule's parallel.pp_schedule.
  const parallel::pipeline::ScheduleShape shape = schedule_shape(config, mc);
  try {
    parallel::pipeline::make_schedule(shape);
  } catch (const Error& e) {
    throw Error(e.message() + " (parallel.pp_schedule " + p.pp_schedule + ", train.grad_accum " +
                    std::to_string(config.train.grad_accum) + ")",
                ErrorContext{"", "parallel.pp_schedule", -1});
  }
  const int64_t every = config.sample.every, checkpoints = config.checkpoint.every;
  K3_CHECK_CTX(every == 0 || (checkpoints > 0 && every % checkpoints == 0),
               (ErrorContext{"", "sample.every", -1}),
               "under pipeline parallelism a sample decodes the checkpoint of its step in one "
               "process, so sample.every (",
               every, ") must be a multiple of checkpoint.every (", checkpoints,
               "; 0: off); or set it to 0 for the end-of-run sample alone");
}

// data.documents: every sequence mixer must take packed documents (KDA and gated MLA do), and
// under context parallelism a rank's micro-batch must be one sequence.
void check_documents(const RunConfig& config, const model::ModelConfig& mc) {
  if (!config.data.documents) return;
  const ErrorContext ctx{"", "data.documents", -1};
  for (int64_t l = 0; l < mc.num_hidden_layers; ++l)
    K3_CHECK_CTX(model::mixer_kind(mc, l) != model::MixerKind::GatedAttention, ctx,
                 "packed documents are taken by KDA and gated MLA layers only; layer ", l + 1,
                 " of this model is gated attention");
  const ParallelSection& p = config.parallel;
  const int64_t rows = config.train.batch_size / (p.dp * p.ep);
  K3_CHECK_CTX(p.cp == 1 || rows == 1, ctx,
               "packed documents under context parallelism take one sequence per rank's "
               "micro-batch: train.batch_size / (dp·ep) = ",
               rows);
}

// Context parallelism: KDA runs KCP and gated MLA ring attention; the plain gated attention has
// no context-parallel algorithm.
void check_context(const RunConfig& config, const model::ModelConfig& mc) {
  if (config.parallel.cp == 1) return;
  for (int64_t l = 0; l < mc.num_hidden_layers; ++l)
    K3_CHECK_CTX(model::mixer_kind(mc, l) != model::MixerKind::GatedAttention,
                 (ErrorContext{"", "parallel.cp", -1}),
                 "context parallelism runs KDA (KCP) and gated MLA (ring attention) layers only; "
                 "layer ",
                 l + 1, " of this model is the plain gated attention");
}

PreflightResult preflight(const RunConfig& config, const model::ModelConfig& mc) {
  PreflightResult r;
  check_parallel(config.parallel, config.train, config.data.seq_len, dist::Runtime::world_size());
  check_image_text(config, mc);
  check_context(config, mc);
  check_documents(config, mc);
  check_pipeline(config, mc);
  model::check_tensor_parallel(mc, static_cast<int>(config.parallel.tp));
  if (config.train.threads > 0)
    r.threads = user_thread_count(config.train.threads, "train.threads");
  const std::unique_ptr<data::Tokenizer> tokenizer = run_tokenizer(config);
  check_model_for_run(mc, config, *tokenizer);
  // Each pipeline rank's stages (within one, the tp and ep ranks' shards are the same size); the
  // rank needing the most is checked.
  const ParallelSection& p = config.parallel;
  for (int pp_rank = 0; pp_rank < p.pp; ++pp_rank) {
    const model::Model described(mc,
                                 {{"tp", {static_cast<int>(p.tp), 0}},
                                  {"ep", {static_cast<int>(p.ep), 0}},
                                  {"pp", {static_cast<int>(p.pp), pp_rank}}},
                                 pipeline_split(p, mc.num_hidden_layers));
    RunMemory m = estimate_run_memory(described, config, expected_tokens(config.data));
    if (pp_rank == 0 || m.total() > r.memory.total()) r.memory = std::move(m);
  }
  r.limit = memory_limit(config.run.memory_limit_gib);
  check_memory(r.memory, r.limit, config);
  r.dataset = load_run_dataset(config, *tokenizer);
  check_splits(r.dataset, config);
  // Streams held in memory (shards are mapped from their files instead).
  r.memory.data =
      static_cast<double>(r.dataset.train.size() + r.dataset.validation.size()) * sizeof(int32_t);
  return r;
}

namespace {

std::string dry_run_phase(const RunConfig& config) {
  const PreflightResult r = preflight(config, model::load_model_config(config.model.config));
  const auto& d = r.dataset;
  std::string out = strprintf("model:  %s\n", config.model.config.c_str());
  out += strprintf("data:   %s: %lld training tokens, %lld validation tokens\n", d.source.c_str(),
                   static_cast<long long>(d.train_tokens().size()),
                   static_cast<long long>(d.validation_tokens().size()));
  out += strprintf("run:    %s (not created)\n", config.run.dir.c_str());
  out += "\nmemory estimate per rank (fp32 training):\n" + describe(r.memory);
  out += strprintf("  %-20s %12s  %s\n", "available", format_bytes(r.limit.bytes).c_str(),
                   r.limit.source.c_str());
  return out;
}

}  // namespace

std::string dry_run(const RunConfig& config) {
  std::string out = "dry run: every check passed; nothing trained, nothing written\n";
  if (config.curriculum.empty()) return out + dry_run_phase(config);
  int64_t start = 0;
  const std::vector<int64_t> ends = phase_ends(config);
  for (size_t p = 0; p < ends.size(); ++p) {
    const RunConfig phase = phase_config(config, static_cast<int>(p));
    out += strprintf(
        "\nphase %zu of %zu: steps %lld to %lld, %lld x %lld tokens a micro-batch\n", p + 1,
        ends.size(), static_cast<long long>(start + 1), static_cast<long long>(ends[p]),
        static_cast<long long>(phase.train.batch_size), static_cast<long long>(phase.data.seq_len));
    try {
      out += dry_run_phase(phase);
    } catch (const Error& e) {
      throw Error("curriculum[" + std::to_string(p) + "]: " + e.message(), e.context());
    }
    start = ends[p];
  }
  return out;
}

}  // namespace k3::train
