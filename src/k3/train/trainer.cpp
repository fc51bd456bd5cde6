#include "k3/train/trainer.h"

#include <sys/resource.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "k3/base/checksum.h"
#include "k3/base/dir_lock.h"
#include "k3/base/error.h"
#include "k3/base/fma_peak.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/log.h"
#include "k3/base/profile.h"
#include "k3/base/stop_signals.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "k3/data/batcher.h"
#include "k3/dist/grid.h"
#include "k3/optim/clip.h"
#include "k3/optim/schedule.h"
#include "k3/parallel/optim_adapters.h"
#include "k3/parallel/pipeline/chrome_trace.h"
#include "k3/parallel/pipeline/timeline_chart.h"
#include "k3/parallel/zero/data_parallel.h"
#include "k3/train/activations.h"
#include "k3/train/curriculum.h"
#include "k3/train/evaluate.h"
#include "k3/train/expert_load.h"
#include "k3/train/expert_load_gather.h"
#include "k3/train/history.h"
#include "k3/train/image_text_data.h"
#include "k3/train/loss_plot.h"
#include "k3/train/metrics.h"
#include "k3/train/peer_loss.h"
#include "k3/train/preflight.h"
#include "k3/train/progress.h"
#include "k3/train/resume.h"

namespace k3::train {
namespace {

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// K3's parameter groups (math §7): Muon for matrices, AdamW for the rest, one lr and λ.
// train.optimizer = "adamw" puts every trainable tensor under AdamW (the router bias stays with
// Quantile Balancing); "muon" keeps the default grouping. Sharded over dp by parallel.zero.
parallel::DataParallel make_data_parallel(model::Model& model, const RunConfig& c,
                                          const dist::ProcessGrid& grid) {
  const TrainSection& t = c.train;
  const ParallelSection& p = c.parallel;
  return parallel::DataParallel(
      model, grid, optimizer_plan(parallel::param_set(model.params()).slots, model.config(), t),
      optim::OptimizerConfig{.beta1 = static_cast<float>(t.beta1),
                             .beta2 = static_cast<float>(t.beta2),
                             .eps = static_cast<float>(t.eps),
                             .weight_decay = static_cast<float>(t.weight_decay),
                             .ns_precision = t.gemm_precision()},
      parallel::DataParallelOptions{
          .zero = static_cast<int>(p.zero),
          .bucket_floats = static_cast<size_t>(p.bucket_mib * 1024 * 1024 / sizeof(float)),
          .overlap = p.overlap,
          .schedule = pipeline_schedule(p),
          .group = static_cast<int>(p.pp_group),
          .fillers = pipeline_fillers(p)});
}

// Every rank must train the same run: a job launched with different arguments or files on
// different ranks would wait forever in mismatched collectives. Refused on the rank that differs.
void check_same_run(const dist::Comm& world, const RunConfig& config,
                    const model::ModelConfig& model) {
  if (world.size() == 1) return;
  Sha256 hash;
  hash.update(to_toml(config));
  hash.update(model::model_config_to_json(model).dump());
  const std::array<uint8_t, 32> mine = hash.digest();
  std::array<int32_t, 8> lead{};
  std::memcpy(lead.data(), mine.data(), mine.size());
  world.broadcast(lead.data(), static_cast<int64_t>(lead.size()), 0);
  K3_CHECK(std::memcmp(lead.data(), mine.data(), mine.size()) == 0, "rank ", world.rank(),
           " resolved another run configuration than rank 0 (different arguments, files or "
           "working directory on this rank?)");
}

dist::ParallelDims dims_of(const ParallelSection& p) {
  return {.tp = static_cast<int>(p.tp),
          .cp = static_cast<int>(p.cp),
          .ep = static_cast<int>(p.ep),
          .dp = static_cast<int>(p.dp),
          .pp = static_cast<int>(p.pp),
          .sequence_parallel = p.sequence_parallel,
          .moonep = p.moe_dispatch == "moonep",
          .moonep_slots = static_cast<int>(p.moonep_slots)};
}

// The ranks that hold the lead's model replica (its tp, cp, ep and pp groups): evaluation and
// sampling run on them alone, since a tensor-, context-, expert- or pipeline-parallel forward
// needs every rank of its groups (the ep ranks then all run the same tokens; the cp ranks split
// each sequence, or, decoding, all run it whole; the pp ranks run their stages in turn, but
// decode only on the lead: sample_now).
bool in_lead_group(const dist::ProcessGrid& grid) { return grid.coord().dp == 0; }

nlohmann::json changes_json(const std::vector<FieldChange>& changes) {
  nlohmann::json out = nlohmann::json::array();
  for (const FieldChange& c : changes)
    out.push_back({{"key", c.key}, {"from", c.from}, {"to", c.to}});
  return out;
}

// [sample] must fit the model's context: refused before training, not when the first sample is due.
std::unique_ptr<Session> check_samples_fit(std::unique_ptr<Session> s) {
  const SampleSection& c = s->config.sample;
  try {
    model::check_prompt_fits(static_cast<int64_t>(prompt_ids(*s, c.prompt).size()), c.max_tokens,
                             s->model->config().max_position_embeddings);
  } catch (const Error& e) {
    throw Error(e.message(), ErrorContext{"", "sample." + e.context().field, -1});
  }
  return s;
}

class Run {
 public:
  // A new run (FROM null) or one resumed from a checkpoint, on the data the pre-flight checks
  // loaded. The caller holds the run directory. RUN_CONFIG is the run as configured; CONFIG what
  // it trains with until END_STEP: under a curriculum, phase PHASE's (curriculum.h), else the same.
  // Every rank of the job builds one; the lead (world rank 0) alone prints and writes files.
  Run(const RunConfig& run_config, int phase, const RunConfig& config,
      const model::ModelConfig& model, const TrainOptions& opt, const StopSignals& stop,
      data::TokenDataset dataset, ResumePoint* from, const dist::ProcessGrid& grid)
      : opt_(opt),
        stop_(stop),
        grid_(grid),
        lead_(grid.world().rank() == 0),
        lead_group_(in_lead_group(grid)),
        samples_(grid.pp().size() == 1 ? lead_group_ : lead_),
        s_(check_samples_fit(open_session(config, model, grid))),
        dp_(make_data_parallel(*s_->model, config, grid)),
        activations_(config.activation, s_->acts, grid),
        schedule_(config.train.lr_schedule()),
        dataset_(std::move(dataset)),
        data_fingerprint_(data_fingerprint(dataset_)),
        batcher_(image_text_source(config)
                     ? std::nullopt
                     : std::make_optional<data::Batcher>(
                           dataset_.train_tokens(), config.train.batch_size, config.data.seq_len,
                           static_cast<uint64_t>(config.data.seed))),
        run_dir_(config.run.dir),
        progress_(opt.quiet || !lead_ ? nullptr : std::make_unique<ProgressDisplay>()),
        phase_(phase),
        end_step_(phase < 0 ? config.train.steps : phase_ends(run_config)[phase]) {
    s_->run_config = run_config;
    if (from) {
      resume(*from);
    } else {
      s_->model->initialize(static_cast<uint64_t>(config.model.seed));
      if (lead_) {
        write_file_atomic(run_dir_ + "/config.toml", to_toml(run_config));
        write_file_atomic(run_dir_ + "/model.json",
                          model::model_config_to_json(model).dump(2) + "\n");
        append_history(run_dir_, {{"event", "start"}, {"step", 0}, {"layout", layout_json()}});
      }
    }
    if (phase_ >= 0 && (!from || from->state.phase != phase_)) begin_phase();
    if (lead_) metrics_ = std::make_unique<MetricsWriter>(run_dir_, from ? step_ : -1);
    estimated_activation_bytes_ =
        k3::model::activation_bytes(model, activation_layout(config, model, grid.pp().rank()));
    peak_gflops_ = fma_peak_gflops();
    if (grid.pp().size() > 1)
      say("pipeline: " + s_->model->pipeline().describe() + ", schedule " +
          parallel::pipeline::schedule_kind_name(pipeline_schedule(config.parallel)) +
          (s_->model->has_vision()
               ? std::string(", vision tower ") +
                     parallel::pipeline::fillers_name(pipeline_fillers(config.parallel))
               : std::string()));
  }

  TrainSummary run();

 private:
  void resume(ResumePoint& from);
  void begin_phase();   // says so, and records it in the history
  double train_step();  // one optimizer step; returns the mean loss (NaN when skipped)
  void count_communication(nlohmann::json& record);
  void record_peak_memory(nlohmann::json& record) const;
  int agreed_stop() const;  // the stop signal any rank received, agreed by all (0: none)
  nlohmann::json layout_json() const;
  void evaluate_now(nlohmann::json& record);
  void balance_experts(nlohmann::json& record);
  std::string checkpoint_now();
  void stop_early(TrainSummary& out, int signal);
  std::string sample_now() const;
  // Under pipeline parallelism: the step's measured timeline beside the planned one, drawn to
  // RUN_DIR/pipeline_timeline.svg (collective over pp).
  void draw_timeline();
  void say(const std::string& text) {
    if (progress_) progress_->message(text);
  }

  TrainOptions opt_;
  const StopSignals& stop_;
  const dist::ProcessGrid& grid_;
  bool lead_;
  bool lead_group_;  // the lead's tp × cp × ep × pp ranks: they evaluate together
  bool samples_;     // the lead group, or under pipeline parallelism the lead alone (sample_now)
  std::unique_ptr<Session> s_;
  parallel::DataParallel dp_;  // before the data: a bad optimizer rule is reported first
  ActivationRun activations_;
  optim::Schedule schedule_;
  data::TokenDataset dataset_;
  nlohmann::json data_fingerprint_;       // of the data the run started with, kept in checkpoints
  std::optional<data::Batcher> batcher_;  // text data; the image-text corpus counts samples
  int64_t samples_served_ = 0;            // of the image-text corpus
  optim::StepGuard guard_;
  std::string run_dir_;
  std::unique_ptr<ProgressDisplay> progress_;  // null when quiet
  std::unique_ptr<MetricsWriter> metrics_;
  int64_t step_ = 0, checkpoint_step_ = -1;
  int64_t steps_run_ = 0;  // by this process
  bool timeline_drawn_ = false;
  double peak_gflops_ = 0, last_grad_norm_ = NAN, last_val_loss_ = NAN;
  double estimated_activation_bytes_ = 0;  // the pre-flight estimate for this rank
  std::string last_checkpoint_;
  data::DataCursor cursor() const {
    return batcher_ ? batcher_->cursor() : data::DataCursor{0, samples_served_};
  }
  std::vector<data::Batch> micro_;
  std::vector<ImageTextBatch> micro_images_;      // under the image-text corpus
  std::vector<std::vector<int64_t>> micro_docs_;  // their documents, under data.documents
  std::vector<std::pair<std::string, dist::Counters>> counted_;  // per group, at the last record
  PeerLossNote peer_loss_{run_dir_};                             // after run_dir_
  int phase_;                                                    // of the curriculum, or -1
  int64_t end_step_;  // where this Run stops: the phase's end, or train.steps
};

void Run::resume(ResumePoint& from) {
  const std::string& dir = from.found.dir;
  std::vector<FieldChange> changes = from.changes;
  // A new phase starts its own data (which may be another) from its beginning.
  const bool same_data = from.state.phase == phase_;
  if (same_data)
    for (FieldChange& c :
         check_data_unchanged(from.state.data, data_fingerprint_, from.allowed_changes, run_dir_))
      changes.push_back(std::move(c));
  restore_weights(*s_->model, from.found.checkpoint, dir);
  dp_.optimizer().restore_state(optimizer_state_reader(from.found.checkpoint, dir));
  dp_.optimizer().set_steps_taken(from.state.optimizer_steps);
  step_ = checkpoint_step_ = from.state.step;
  guard_.set_skipped(from.state.skipped_steps);
  if (same_data && batcher_)
    batcher_->seek(from.state.cursor);
  else if (same_data)
    samples_served_ = from.state.cursor.position;
  last_checkpoint_ = dir;
  from.found.checkpoint = {};  // everything is in the model and optimizer now: close the files
  if (!lead_) return;
  nlohmann::json skipped = nlohmann::json::array();
  for (const SkippedCheckpoint& sk : from.found.skipped) skipped.push_back(sk.describe());
  append_history(run_dir_, {{"event", "resume"},
                            {"step", step_},
                            {"checkpoint", dir},
                            {"layout", layout_json()},
                            {"skipped", skipped},
                            {"set_aside", from.set_aside},
                            {"changes", changes_json(changes)}});
  for (const FieldChange& c : changes) log_warn("resuming with ", c.key, " ", c.from, " -> ", c.to);
  say("resumed from " + dir + " at step " + std::to_string(step_));
}

void Run::begin_phase() {
  const RunConfig& c = s_->config;
  const std::string what =
      strprintf("phase %d of %zu: steps %lld to %lld, seq_len %lld, batch %lld", phase_ + 1,
                s_->run_config.curriculum.size(), static_cast<long long>(step_ + 1),
                static_cast<long long>(end_step_), static_cast<long long>(c.data.seq_len),
                static_cast<long long>(c.train.batch_size));
  say(what + ", data " + dataset_.source);
  if (!lead_) return;
  append_history(run_dir_, {{"event", "phase"},
                            {"phase", phase_},
                            {"step", step_},
                            {"seq_len", c.data.seq_len},
                            {"batch_size", c.train.batch_size},
                            {"data", data_fingerprint_},
                            {"activation", c.activation.policy},
                            {"layout", layout_json()}});
}

nlohmann::json Run::layout_json() const {
  const dist::ParallelDims& d = grid_.dims();
  nlohmann::json j = {{"dp", d.dp}, {"tp", d.tp}, {"pp", d.pp},
                      {"ep", d.ep}, {"cp", d.cp}, {"zero", s_->config.parallel.zero}};
  if (d.pp > 1) {
    j["vp"] = s_->model->pipeline().vp;
    j["pp_layers"] = s_->model->pipeline().layers;
  }
  return j;
}

void Run::draw_timeline() {
  if (grid_.pp().size() == 1 || timeline_drawn_) return;
  timeline_drawn_ = true;
  const parallel::pipeline::Timeline measured =
      parallel::pipeline::gather_timeline(grid_.pp(), dp_.measured());
  if (!lead_) return;
  const parallel::pipeline::Schedule& s = dp_.schedule();
  const parallel::pipeline::Timeline planned = parallel::pipeline::simulate(s);
  const std::string path = run_dir_ + "/pipeline_timeline.svg";
  write_svg(path, render_gantt(parallel::pipeline::timeline_chart(s, planned, &measured)));
  // The same step for Perfetto; `k3lab report` puts it in RUN_DIR/trace.json.
  write_file_atomic(
      run_dir_ + "/pipeline_trace.json",
      nlohmann::json{{"step", step_ + 1},
                     {"traceEvents", parallel::pipeline::timeline_trace_events(s, measured)}}
          .dump());
  say(strprintf("pipeline timeline of step %lld: %s (measured bubble %.3f, planned %.3f)",
                static_cast<long long>(step_ + 1), path.c_str(), measured.bubble_ratio(),
                planned.bubble_ratio()));
}

double Run::train_step() {
  const RunConfig& c = s_->config;
  // This rank's share of every micro-batch of the global batch.
  const int64_t rows = dp_.rows(c.train.batch_size);
  std::vector<model::TokenBatch> views;
  if (batcher_) {
    micro_.resize(static_cast<size_t>(c.train.grad_accum));
    micro_docs_.resize(micro_.size());
    for (size_t m = 0; m < micro_.size(); ++m) {
      data::Batch& b = micro_[m];
      batcher_->next(b, dp_.first_row(c.train.batch_size), rows);
      if (c.data.documents) micro_docs_[m] = data::document_starts(b, s_->tokenizer->eos_id());
      views.push_back({b.inputs.data(), b.targets.data(), b.rows, b.seq_len, micro_docs_[m]});
    }
  } else {
    micro_images_.clear();
    for (int64_t m = 0; m < c.train.grad_accum; ++m) {
      micro_images_.push_back(image_text_batch(
          c, s_->model->config(), samples_served_ + dp_.first_row(c.train.batch_size), rows));
      samples_served_ += c.train.batch_size;
      views.push_back(micro_images_.back().view());
    }
  }
  parallel::StepTotals t;
  {
    ProfileScope time(kStepBucket);
    if (activations_.needs_profile()) {  // budget mode: measure once, then plan
      activations_.begin_profile();
      say(activations_.plan(dp_.forward_backward(s_->arena, s_->acts, views).arena_peak));
    }
    activations_.begin_step();
    t = dp_.forward_backward(s_->arena, s_->acts, views);
    activations_.end_step(t.arena_peak);
  }
  // The second step this process runs (the first warms up), or the last.
  if (++steps_run_ == 2 || step_ + 1 == c.train.steps) draw_timeline();
  last_grad_norm_ = t.grad_norm;
  if (!guard_.admit(t.loss, last_grad_norm_)) {
    say(strprintf(
        "step %lld: non-finite loss (%g) or gradient norm (%g): step skipped, nothing applied",
        static_cast<long long>(step_ + 1), t.loss, last_grad_norm_));
    return NAN;
  }
  ProfileScope time(kOptimizerBucket);
  dp_.apply(schedule_.lr(step_), optim::clip_factor(last_grad_norm_, c.train.grad_clip));
  return t.loss;
}

// Bytes, calls and seconds blocked of each process group since the last record (the lead's own).
void Run::count_communication(nlohmann::json& record) {
  if (counted_.empty())
    for (const dist::Comm* g : grid_.groups()) counted_.emplace_back(g->name(), dist::Counters{});
  const auto groups = grid_.groups();
  int64_t mine = 0;  // this rank's bytes in every group but the world's (its own bookkeeping)
  for (size_t i = 0; i < groups.size(); ++i) {
    const dist::Counters& now = groups[i]->counters();
    dist::Counters& before = counted_[i].second;
    if (groups[i] != &grid_.world()) mine += now.bytes() - before.bytes();
    if (groups[i]->size() > 1) {
      record["comm." + counted_[i].first + ".bytes"] = now.bytes() - before.bytes();
      record["comm." + counted_[i].first + ".calls"] = now.calls() - before.calls();
      record["comm." + counted_[i].first + ".seconds"] = now.seconds() - before.seconds();
    }
    before = now;
  }
  if (grid_.dp().size() > 1) record["comm.dp.wait_seconds"] = dp_.sync().wait_seconds();
  record["comm.bytes"] = mine;
}

// Every rank's peak resident memory so far (MiB, in world rank order), its activations' measured
// peak beside their estimate, and its bytes communicated since the last record, after the step's
// counters were read: its one small all-gather is counted in the next step's (world group).
void Run::record_peak_memory(nlohmann::json& record) const {
  const dist::Comm& world = grid_.world();
  if (world.size() == 1) return;
  const auto ranks = static_cast<size_t>(world.size()), me = static_cast<size_t>(world.rank());
  constexpr size_t kValues = 4;
  std::vector<double> all(kValues * ranks);
  all[kValues * me] = peak_rss_mib();
  all[kValues * me + 1] = record["activation.peak_bytes"].get<double>();
  all[kValues * me + 2] = estimated_activation_bytes_;
  all[kValues * me + 3] = record["comm.bytes"].get<double>();
  world.all_gather(all.data(), std::vector<int64_t>(ranks, kValues));
  const char* names[] = {"peak_memory_mib.ranks", "activation.peak_bytes.ranks",
                         "memory.estimated_activation_bytes.ranks", "comm.bytes.ranks"};
  for (size_t k = 0; k < kValues; ++k) {
    std::vector<double> by_rank(ranks);
    for (size_t r = 0; r < ranks; ++r) by_rank[r] = all[kValues * r + k];
    record[names[k]] = by_rank;
  }
}

int Run::agreed_stop() const {
  // One flag per signal number, summed over the world: every rank stops after the same step,
  // whichever of them the signal reached.
  std::array<int32_t, 32> flags{};
  if (int s = stop_.requested(); s > 0 && s < 32) flags[static_cast<size_t>(s)] = 1;
  grid_.world().all_reduce(flags.data(), static_cast<int64_t>(flags.size()));
  for (size_t s = 1; s < flags.size(); ++s)
    if (flags[s]) return static_cast<int>(s);
  return 0;
}

// Quantile Balancing once per global batch; per-layer load figures go to metrics.jsonl and the
// full per-expert loads to expert_load.jsonl (drawn by `k3lab report`).
void Run::balance_experts(nlohmann::json& record) {
  // The routing counts of every data-parallel rank's tokens, summed: every rank moves its
  // router bias identically.
  ExpertLoadRecord mine{step_, s_->model->end_global_batch(dp_.count_reducer()), {}};
  if (grid_.ep().size() > 1) mine.dispatch = s_->model->take_dispatch_stats();
  if (s_->model->config().num_experts == 0) return;
  // Each pp rank balanced its own stages' layers: the lead records them all.
  const ExpertLoadRecord all = gather_expert_load(grid_.pp(), std::move(mine));
  if (!lead_ || all.layers.empty()) return;
  for (const auto& [layer, d] : all.dispatch) {
    const std::string l = std::to_string(layer);
    const auto spread = [](const std::vector<int64_t>& rows) {
      double sum = 0;
      for (int64_t r : rows) sum += static_cast<double>(r);
      const double mean = sum / static_cast<double>(rows.size());
      return std::pair{*std::max_element(rows.begin(), rows.end()), mean};
    };
    const auto [max, mean] = spread(d.rows);
    const auto [home_max, home_mean] = spread(d.home_rows);
    record["moe.rows_max." + l] = max;
    record["moe.rows_mean." + l] = mean;
    record["moe.home_rows_max." + l] = home_max;
    record["moe.replicas." + l] = d.replicas;
    record["moe.overflow." + l] = d.overflow;
    record["moe.bytes." + l] = d.bytes;
  }
  double worst = 0;
  for (const auto& [layer, st] : all.layers) {
    const std::string l = std::to_string(layer);
    record["moe.maxvio." + l] = st.maxvio;
    record["moe.min_load." + l] = st.min_load;
    record["moe.max_load." + l] = st.max_load;
    record["moe.idle." + l] = st.idle;
    worst = std::max(worst, st.maxvio);
  }
  record["moe.maxvio"] = worst;
  append_expert_load(run_dir_, step_, all.layers, all.dispatch);
}

void Run::evaluate_now(nlohmann::json& record) {
  EvalResult e = evaluate_run(*s_, dataset_, s_->config.eval.batches);
  last_val_loss_ = e.loss;
  record["val_loss"] = e.loss;
  record["val_perplexity"] = e.perplexity;
  std::string line = strprintf("step %lld: validation loss %.4f, perplexity %.3f",
                               static_cast<long long>(step_), e.loss, e.perplexity);
  if (std::isfinite(s_->loss_floor))
    line += strprintf(" (floor %.4f, +%.4f)", s_->loss_floor, e.loss - s_->loss_floor);
  say(line);
}

std::string Run::checkpoint_now() {
  nlohmann::json manifest = {{"step", step_},
                             {"optimizer", dp_.optimizer().summary()},
                             {"optimizer_steps", dp_.optimizer().steps_taken()},
                             {"skipped_steps", guard_.skipped()},
                             {"data_cursor", cursor().to_string()},
                             {"seed", s_->config.model.seed},
                             {"rng", "philox4x32-10; stateless, keyed by (seed, stream, index)"},
                             {"layout", layout_json()},
                             {"data", data_fingerprint_}};
  if (phase_ >= 0) manifest["phase"] = phase_;
  // Every rank runs the save's fills, each gathering one tensor in global coordinates from the
  // ranks' shards; the lead alone writes.
  last_checkpoint_ = save_checkpoint(
      run_dir_, step_,
      make_checkpoint(*s_, optimizer_sources(dp_.optimizer(), *s_->model), manifest),
      static_cast<int>(s_->config.checkpoint.keep_last),
      /*writer=*/lead_);
  checkpoint_step_ = step_;
  return last_checkpoint_;
}

// A stop signal arrived: the step is done; save it and leave everything complete.
void Run::stop_early(TrainSummary& out, int signal) {
  out.stop_signal = signal;
  if (checkpoint_step_ != step_) checkpoint_now();
  if (!lead_) return;
  append_history(run_dir_, {{"event", "stop"},
                            {"signal", signal_name(out.stop_signal)},
                            {"step", step_},
                            {"checkpoint", last_checkpoint_}});
  say(strprintf(
      "stopped by %s after step %lld: checkpoint %s; continue with k3lab train --resume %s",
      signal_name(out.stop_signal), static_cast<long long>(step_), last_checkpoint_.c_str(),
      run_dir_.c_str()));
}

std::string Run::sample_now() const {
  const SampleSection& c = s_->config.sample;
  const model::SamplingParams p{c.temperature, c.top_k, c.top_p, static_cast<uint64_t>(step_)};
  if (grid_.pp().size() == 1) return sample_text(*s_, c.prompt, c.max_tokens, p).text;
  // Decoding needs every layer on one rank: under pipeline parallelism the lead decodes the
  // checkpoint of this step (global, so it loads whole) in a session of its own.
  K3_CHECK(checkpoint_step_ == step_, "no checkpoint of step ", step_, " to sample");
  return sample_text(*open_checkpoint_session(last_checkpoint_), c.prompt, c.max_tokens, p).text;
}

TrainSummary Run::run() {
  const RunConfig& c = s_->config;
  const int64_t tokens_per_step = c.train.batch_size * c.data.seq_len * c.train.grad_accum;
  const double flops_per_token = s_->model->train_flops_per_token(c.data.seq_len);
  TrainSummary out;
  out.run_dir = run_dir_;
  out.loss_floor = s_->loss_floor;
  Timer since_start;
  int64_t first_step = step_;
  while (step_ < end_step_) {
    Timer t;
    double loss = train_step();
    ++step_;
    const double secs = t.seconds(), tok_s = static_cast<double>(tokens_per_step) / secs;
    out.train_loss = loss;
    nlohmann::json rec = {{"step", step_},
                          {"loss", loss},
                          {"lr", schedule_.lr(step_ - 1)},
                          {"grad_norm", last_grad_norm_},
                          {"tokens_per_second", tok_s},
                          {"mfu", flops_per_token * tok_s / (peak_gflops_ * 1e9)},
                          {"step_seconds", secs},
                          {"peak_memory_mib", peak_rss_mib()},
                          {"skipped_steps", guard_.skipped()}};
    if (phase_ >= 0) {
      rec["phase"] = phase_;
      rec["seq_len"] = c.data.seq_len;
    }
    activations_.record(rec);
    rec["memory.estimated_activation_bytes"] = estimated_activation_bytes_;
    balance_experts(rec);
    count_communication(rec);
    record_peak_memory(rec);
    // Evaluation and samples are the lead group's (samples, under pp, the lead's), metrics and
    // plots the lead's; the other ranks go on to the next step's first collective and wait there.
    const bool evaluate =
        lead_group_ && c.eval.every > 0 && (step_ % c.eval.every == 0 || step_ == end_step_);
    if (evaluate) evaluate_now(rec);
    if (metrics_) metrics_->write(rec);
    if (evaluate && lead_) write_loss_plot(run_dir_, c);
    if (progress_) {
      const double elapsed = since_start.seconds();
      progress_->update({step_, c.train.steps, loss, s_->loss_floor, schedule_.lr(step_ - 1), tok_s,
                         elapsed / static_cast<double>(step_ - first_step) *
                             static_cast<double>(c.train.steps - step_)});
    }
    if ((c.checkpoint.every > 0 && step_ % c.checkpoint.every == 0) || step_ == end_step_)
      checkpoint_now();
    if (samples_ && c.sample.every > 0 && step_ % c.sample.every == 0 && step_ != c.train.steps)
      say("sample: " + sample_now());
    if (const int signal = agreed_stop(); signal && step_ < end_step_) {
      stop_early(out, signal);
      break;
    }
  }
  if (progress_) progress_->finish();
  out.steps = step_;
  out.validation_loss = last_val_loss_;
  out.last_checkpoint = last_checkpoint_;
  out.activation_report = activations_.report();
  const bool finished = step_ == c.train.steps;
  if (samples_ && finished) out.sample = sample_now();
  if (!lead_) return out;
  out.loss_plot = write_loss_plot(run_dir_, c);
  if (!finished) return out;
  append_history(run_dir_, {{"event", "finish"}, {"step", step_}});
  return out;
}

// The pre-flight checks of every phase from step FROM_STEP on, the same run on every rank: a phase
// that cannot run is refused before any training. The data of the first is kept for it.
PreflightResult preflight_phases(const dist::Comm& world, const RunConfig& run_config,
                                 const model::ModelConfig& model, int64_t from_step) {
  const int first = run_config.curriculum.empty() ? -1 : phase_at(run_config, from_step);
  PreflightResult kept;
  for (int p = static_cast<int>(run_config.curriculum.size()) - 1; p >= first; --p) {
    const RunConfig config = phase_config(run_config, p);
    try {
      check_same_run(world, config, model);
      PreflightResult checked = preflight(config, model);
      if (p == first) kept = std::move(checked);
    } catch (const Error& e) {
      if (p < 0) throw;
      throw Error("curriculum[" + std::to_string(p) + "]: " + e.message(), e.context());
    }
  }
  return kept;
}

// Trains from FROM (null: a new run) to train.steps. Under a curriculum, one Run a phase: the
// phase's last step is checkpointed and the next phase resumes from that checkpoint in a Run of
// its own, so that its data, activation policy and layout may differ. CHECKED: the pre-flight
// result of the first phase.
TrainSummary train_phases(const RunConfig& run_config, const model::ModelConfig& model,
                          const TrainOptions& options, const StopSignals& stop,
                          PreflightResult checked, ResumePoint* from) {
  const dist::Comm world = dist::Comm::world();
  ResumePoint next;
  for (;;) {
    const int64_t step = from ? from->state.step : 0;
    const int phase = run_config.curriculum.empty() ? -1 : phase_at(run_config, step);
    const RunConfig config = phase_config(run_config, phase);
    if (checked.threads > 0) set_num_threads(checked.threads);
    const dist::ProcessGrid grid(dims_of(config.parallel), world);
    Run run(run_config, phase, config, model, options, stop, std::move(checked.dataset), from,
            grid);
    TrainSummary out = run.run();
    if (out.stop_signal || out.steps >= run_config.train.steps) return out;
    world.barrier();  // the phase's last checkpoint is saved
    next = plan_resume(run_config.run.dir, "", {}, {});
    from = &next;
    checked = preflight(phase_config(run_config, phase_at(run_config, out.steps)), model);
  }
}

}  // namespace

TrainSummary train(const RunConfig& config, const TrainOptions& options) {
  StopSignals stop;
  const std::string& dir = config.run.dir;
  const dist::Comm world = dist::Comm::world();
  const bool lead = world.rank() == 0;  // the lead alone owns and writes the run directory
  // Locked as soon as it exists, so a second trainer is refused before any work.
  std::unique_ptr<DirLock> lock;
  if (lead && std::filesystem::is_directory(dir))
    lock = std::make_unique<DirLock>(dir, "k3lab train");
  K3_CHECK_CTX(list_checkpoints(dir).empty(), (ErrorContext{dir, "", -1}),
               "the run directory already holds checkpoints: continue it with k3lab train "
               "--resume ",
               dir, ", or choose another run.dir");
  const model::ModelConfig model = model::load_model_config(config.model.config);
  PreflightResult checked = preflight_phases(world, config, model, 0);
  if (lead && !lock) {
    std::filesystem::create_directories(dir);
    lock = std::make_unique<DirLock>(dir, "k3lab train");
  }
  return train_phases(config, model, options, stop, std::move(checked), nullptr);
}

TrainSummary resume(const ResumeRequest& request, const TrainOptions& options) {
  StopSignals stop;
  const std::string& dir = request.run_dir;
  K3_CHECK_CTX(std::filesystem::is_directory(dir + "/checkpoints"), (ErrorContext{dir, "", -1}),
               "not a run directory (it has no checkpoints/ folder)");
  const dist::Comm world = dist::Comm::world();
  const bool lead = world.rank() == 0;
  auto plan = [&] {
    return plan_resume(dir, request.config_path, request.overrides, request.allowed_changes);
  };
  // The lead tidies the checkpoints (unfinished saves removed, unusable ones set aside) before
  // any other rank looks for the newest usable one.
  std::unique_ptr<DirLock> lock;
  ResumePoint from;
  if (lead) {
    lock = std::make_unique<DirLock>(dir, "k3lab train");
    if (int n = remove_unfinished_saves(dir); n > 0)
      log_warn("removed ", n, " unfinished checkpoint save(s) in ", dir, "/checkpoints");
    from = plan();
    for (const SkippedCheckpoint& sk : from.found.skipped) {
      from.set_aside.push_back(set_aside_checkpoint(sk.dir));
      log_warn("skipped checkpoint ", sk.describe(), "; set aside as ", from.set_aside.back());
    }
  }
  world.barrier();
  if (!lead) from = plan();
  TrainSummary done;
  if (from.state.step >= from.config.train.steps) {  // nothing to do: say so, change nothing
    done.run_dir = dir;
    done.steps = from.state.step;
    done.finished_before = true;
    done.last_checkpoint = from.found.dir;
    return done;
  }
  PreflightResult checked = preflight_phases(world, from.config, from.model, from.state.step);
  return train_phases(from.config, from.model, options, stop, std::move(checked), &from);
}

}  // namespace k3::train
