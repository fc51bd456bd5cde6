#include "k3/train/loop/train_loop.h"

#include <array>
#include <cmath>

#include "k3/base/error.h"
#include "k3/base/fma_peak.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/base/log.h"
#include "k3/base/profile.h"
#include "k3/base/timer.h"
#include "k3/model/memory_estimate.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/config/curriculum.h"
#include "k3/train/config/parallel.h"
#include "k3/train/observe/history.h"
#include "k3/train/observe/loss_plot.h"
#include "k3/train/preflight/memory_estimate.h"

namespace k3::train {
namespace {

nlohmann::json changes_json(const std::vector<FieldChange>& changes) {
  nlohmann::json out = nlohmann::json::array();
  for (const FieldChange& c : changes)
    out.push_back({{"key", c.key}, {"from", c.from}, {"to", c.to}});
  return out;
}

}  // namespace

TrainLoop::TrainLoop(const RunConfig& whole_run, int phase, const RunConfig& config,
                     const model::ModelConfig& model, const TrainOptions& options,
                     const StopSignals& stop, data::TokenDataset dataset, ResumePoint* from,
                     const dist::ProcessGrid& grid)
    : stop_(stop),
      grid_(grid),
      lead_(grid.world().rank() == 0),
      run_dir_(config.run.dir),
      phase_(phase),
      end_step_(phase < 0 ? config.train.steps : phase_ends(whole_run)[phase]),
      s_(open_session(config, model, grid)),
      sampler_(*s_, grid),
      engine_(*s_, grid, [this](const std::string& line) { say(line); }),
      dataset_(std::move(dataset)),
      data_fingerprint_(data_fingerprint(dataset_)),
      batches_(s_->config, s_->model->config(), dataset_, s_->tokenizer->eos_id()),
      evaluator_(*s_, dataset_, grid),
      checkpointer_(config.checkpoint, run_dir_, lead_),
      progress_(options.quiet || !lead_ ? nullptr : std::make_unique<ProgressDisplay>()),
      comm_(grid, engine_.parallel().sync()),
      memory_(grid, engine_.activations(), comm_,
              model::activation_bytes(model, activation_layout(config, model, grid.pp().rank()))),
      experts_(grid, model.num_experts > 0, run_dir_),
      timeline_(grid, engine_.parallel(), run_dir_, config.train.steps,
                [this](const std::string& line) { say(line); }),
      recorders_{&experts_, &timeline_, &comm_, &memory_},
      peer_loss_(run_dir_) {
  s_->whole_run = whole_run;
  if (from)
    resume(*from);
  else
    start();
  if (phase_ >= 0 && (!from || from->state.phase != phase_)) begin_phase();
  if (lead_) metrics_ = std::make_unique<MetricsWriter>(run_dir_, from ? step_ : -1);
  peak_gflops_ = fma_peak_gflops();
  flops_per_token_ = s_->model->train_flops_per_token(config.data.seq_len);
  if (grid.pp().size() > 1)
    say("pipeline: " + s_->model->pipeline().describe() + ", schedule " +
        parallel::pipeline::schedule_kind_name(pipeline_schedule(config.parallel)) +
        (s_->model->has_vision()
             ? std::string(", vision tower ") +
                   parallel::pipeline::fillers_name(pipeline_fillers(config.parallel))
             : std::string()));
}

void TrainLoop::start() {
  s_->model->initialize(static_cast<uint64_t>(s_->config.model.seed));
  if (!lead_) return;
  write_file_atomic(run_dir_ + "/config.toml", to_toml(s_->whole_run));
  write_file_atomic(run_dir_ + "/model.json",
                    model::model_config_to_json(s_->model->config()).dump(2) + "\n");
  append_history(run_dir_, {{"event", "start"}, {"step", 0}, {"layout", layout()}});
}

void TrainLoop::resume(ResumePoint& from) {
  const std::string& dir = from.found.dir;
  std::vector<FieldChange> changes = from.changes;
  // A new phase starts its own data (which may be another) from its beginning.
  const bool same_data = from.state.phase == phase_;
  if (same_data)
    for (FieldChange& c :
         check_data_unchanged(from.state.data, data_fingerprint_, from.allowed_changes, run_dir_))
      changes.push_back(std::move(c));
  restore_weights(*s_->model, from.found.checkpoint, dir);
  parallel::ShardedOptimizer& optimizer = engine_.parallel().optimizer();
  optimizer.restore_state(optimizer_state_reader(from.found.checkpoint, dir));
  optimizer.set_steps_taken(from.state.optimizer_steps);
  step_ = from.state.step;
  checkpointer_.resumed_from(step_, dir);
  engine_.guard().set_skipped(from.state.skipped_steps);
  if (same_data) batches_.seek(from.state.cursor);
  from.found.checkpoint = {};  // everything is in the model and optimizer now: close the files
  if (!lead_) return;
  nlohmann::json skipped = nlohmann::json::array();
  for (const SkippedCheckpoint& sk : from.found.skipped) skipped.push_back(sk.describe());
  append_history(run_dir_, {{"event", "resume"},
                            {"step", step_},
                            {"checkpoint", dir},
                            {"layout", layout()},
                            {"skipped", skipped},
                            {"set_aside", from.set_aside},
                            {"changes", changes_json(changes)}});
  for (const FieldChange& c : changes) log_warn("resuming with ", c.key, " ", c.from, " -> ", c.to);
  say("resumed from " + dir + " at step " + std::to_string(step_));
}

void TrainLoop::begin_phase() {
  const RunConfig& c = s_->config;
  const std::string what =
      strprintf("phase %d of %zu: steps %lld to %lld, seq_len %lld, batch %lld", phase_ + 1,
                s_->whole_run.curriculum.size(), static_cast<long long>(step_ + 1),
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
                            {"layout", layout()}});
}

nlohmann::json TrainLoop::layout() const {
  return layout_json(grid_.dims(), s_->config.parallel, s_->model->pipeline());
}

TrainSummary TrainLoop::run() {
  const RunConfig& c = s_->config;
  TrainSummary out;
  out.run_dir = run_dir_;
  out.loss_floor = s_->loss_floor;
  Timer since_start;
  const int64_t first_step = step_;
  const int64_t tokens_per_step = c.train.batch_size * c.data.seq_len * c.train.grad_accum;
  while (step_ < end_step_) {
    Timer timer;
    const int64_t rows = c.train.batch_size;
    const StepResult r =
        engine_.step(step_, batches_.next(engine_.first_row(rows), engine_.rows(rows)));
    ++step_;
    const double seconds = timer.seconds();
    const double tokens_per_second = static_cast<double>(tokens_per_step) / seconds;
    out.train_loss = r.loss;
    nlohmann::json rec = step_record(r, seconds, tokens_per_second);
    for (Recorder* recorder : recorders_) recorder->record(step_, r, rec);
    const bool evaluate_now = evaluator_.due(step_, end_step_);
    if (evaluate_now) evaluate(rec);
    if (metrics_) metrics_->write(rec);
    if (evaluate_now && lead_) write_loss_plot(run_dir_, c);
    show_progress(r.loss, tokens_per_second, since_start.seconds(), first_step);
    if (checkpointer_.due(step_, end_step_)) save();
    if (sampler_.due(step_)) {
      ProfileScope time("sampling");
      say("sample: " + sampler_.sample(step_, checkpointer_));
    }
    if (const int signal = agreed_stop(); signal && step_ < end_step_) {
      stop_early(out, signal);
      break;
    }
  }
  if (progress_) progress_->finish();
  out.steps = step_;
  out.validation_loss = evaluator_.last_loss();
  out.last_checkpoint = checkpointer_.last();
  out.activation_report = engine_.activations().report();
  const bool finished = step_ == c.train.steps;
  if (sampler_.member() && finished) out.sample = sampler_.sample(step_, checkpointer_);
  if (!lead_) return out;
  out.loss_plot = write_loss_plot(run_dir_, c);
  if (finished) append_history(run_dir_, {{"event", "finish"}, {"step", step_}});
  return out;
}

// The step's own figures: its loss, learning rate, pace and activations.
nlohmann::json TrainLoop::step_record(const StepResult& r, double seconds,
                                      double tokens_per_second) const {
  const RunConfig& c = s_->config;
  nlohmann::json rec = {{"step", step_},
                        {"loss", r.loss},
                        {"lr", engine_.lr(step_ - 1)},
                        {"grad_norm", r.grad_norm},
                        {"tokens_per_second", tokens_per_second},
                        {"mfu", flops_per_token_ * tokens_per_second / (peak_gflops_ * 1e9)},
                        {"step_seconds", seconds},
                        {"skipped_steps", engine_.guard().skipped()}};
  if (phase_ >= 0) {
    rec["phase"] = phase_;
    rec["seq_len"] = c.data.seq_len;
  }
  engine_.activations().record(rec);
  return rec;
}

void TrainLoop::evaluate(nlohmann::json& rec) {
  ProfileScope time("evaluation");
  const EvalResult e = evaluator_.run();
  time.stop();
  rec["val_loss"] = e.loss;
  rec["val_perplexity"] = e.perplexity;
  std::string line = strprintf("step %lld: validation loss %.4f, perplexity %.3f",
                               static_cast<long long>(step_), e.loss, e.perplexity);
  if (std::isfinite(s_->loss_floor))
    line += strprintf(" (floor %.4f, +%.4f)", s_->loss_floor, e.loss - s_->loss_floor);
  say(line);
}

void TrainLoop::show_progress(double loss, double tokens_per_second, double elapsed,
                              int64_t first_step) {
  if (!progress_) return;
  const int64_t total = s_->config.train.steps;
  progress_->update(
      {step_, total, loss, s_->loss_floor, engine_.lr(step_ - 1), tokens_per_second,
       elapsed / static_cast<double>(step_ - first_step) * static_cast<double>(total - step_)});
}

void TrainLoop::save() {
  parallel::ShardedOptimizer& optimizer = engine_.parallel().optimizer();
  TrainingState state;
  state.step = step_;
  state.optimizer_steps = optimizer.steps_taken();
  state.skipped_steps = engine_.guard().skipped();
  state.cursor = batches_.cursor();
  state.data = data_fingerprint_;
  state.phase = phase_;
  checkpointer_.save(*s_, optimizer, state, layout());
}

// A stop signal arrived: the step is done; save it and leave everything complete.
void TrainLoop::stop_early(TrainSummary& out, int signal) {
  out.stop_signal = signal;
  if (checkpointer_.last_step() != step_) save();
  if (!lead_) return;
  append_history(run_dir_, {{"event", "stop"},
                            {"signal", signal_name(out.stop_signal)},
                            {"step", step_},
                            {"checkpoint", checkpointer_.last()}});
  say(strprintf(
      "stopped by %s after step %lld: checkpoint %s; continue with k3lab train --resume %s",
      signal_name(out.stop_signal), static_cast<long long>(step_), checkpointer_.last().c_str(),
      run_dir_.c_str()));
}

int TrainLoop::agreed_stop() const {
  // One flag per signal number, summed over the world: every rank stops after the same step,
  // whichever of them the signal reached.
  std::array<int32_t, 32> flags{};
  if (int s = stop_.requested(); s > 0 && s < 32) flags[static_cast<size_t>(s)] = 1;
  grid_.world().all_reduce(flags.data(), static_cast<int64_t>(flags.size()));
  for (size_t s = 1; s < flags.size(); ++s)
    if (flags[s]) return static_cast<int>(s);
  return 0;
}

}  // namespace k3::train
