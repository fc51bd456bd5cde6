#include "k3/train/preflight/preflight.h"

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
#include "k3/train/config/curriculum.h"
#include "k3/train/config/parallel.h"
#include "k3/train/loop/activations.h"
#include "k3/train/loop/image_text_data.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;

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

}  // namespace

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

// The first layer (0-based) whose mixer is the plain gated attention, which takes neither packed
// documents nor a sequence split over ranks; -1 if none.
static int64_t first_gated_attention_layer(const model::ModelConfig& mc) {
  for (int64_t l = 0; l < mc.num_hidden_layers; ++l)
    if (model::mixer_kind(mc, l) == model::MixerKind::GatedAttention) return l;
  return -1;
}

// data.documents: every sequence mixer must take packed documents (KDA and gated MLA do), and
// under context parallelism a rank's micro-batch must be one sequence.
void check_documents(const RunConfig& config, const model::ModelConfig& mc) {
  if (!config.data.documents) return;
  const ErrorContext ctx{"", "data.documents", -1};
  const int64_t gated = first_gated_attention_layer(mc);
  K3_CHECK_CTX(gated < 0, ctx,
               "packed documents are taken by KDA and gated MLA layers only; layer ", gated + 1,
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
  const int64_t gated = first_gated_attention_layer(mc);
  K3_CHECK_CTX(gated < 0, (ErrorContext{"", "parallel.cp", -1}),
               "context parallelism runs KDA (KCP) and gated MLA (ring attention) layers only; "
               "layer ",
               gated + 1, " of this model is the plain gated attention");
}

PreflightResult preflight(const RunConfig& config, const model::ModelConfig& mc) {
  PreflightResult r;
  model::check_trainable(mc);
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
    out += within_phase(static_cast<int>(p), [&] { return dry_run_phase(phase); });
    start = ends[p];
  }
  return out;
}

}  // namespace k3::train
