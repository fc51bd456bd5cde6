#include "k3/train/trainer.h"

#include <sys/resource.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/base/fma_peak.h"
#include "k3/base/fs.h"
#include "k3/base/profile.h"
#include "k3/base/threads.h"
#include "k3/base/timer.h"
#include "k3/data/batcher.h"
#include "k3/optim/clip.h"
#include "k3/optim/schedule.h"
#include "k3/train/evaluate.h"
#include "k3/train/expert_load.h"
#include "k3/train/format.h"
#include "k3/train/metrics.h"
#include "k3/train/preflight.h"
#include "k3/train/progress.h"
#include "k3/train/svg_plot.h"

namespace k3::train {
namespace {

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

// K3's parameter groups (spec §7): Muon for matrices, AdamW for the rest, one lr and λ.
// train.optimizer = "adamw" puts every trainable tensor under AdamW (the router bias stays with
// Quantile Balancing); "muon" keeps the default grouping.
Optimizer make_optimizer(Model& model, const TrainSection& t) {
  const ParamSet params = param_set(model.params());
  return Optimizer(params, optimizer_plan(params.slots, model.config(), t),
                   OptimizerConfig{.beta1 = static_cast<float>(t.beta1),
                                   .beta2 = static_cast<float>(t.beta2),
                                   .eps = static_cast<float>(t.eps),
                                   .weight_decay = static_cast<float>(t.weight_decay)});
}

class Run {
 public:
  Run(const RunConfig& config, const TrainOptions& opt, data::TokenDataset dataset)
      : opt_(opt),
        s_(open_session(config)),
        optimizer_(make_optimizer(*s_->model, config.train)),
        schedule_(config.train.lr_schedule()),
        dataset_(std::move(dataset)),
        batcher_(dataset_.train, config.train.batch_size, config.data.seq_len,
                 static_cast<uint64_t>(config.model.seed)),
        run_dir_(config.run.dir),
        progress_(opt.quiet ? nullptr : std::make_unique<ProgressDisplay>()) {
    std::filesystem::create_directories(run_dir_);
    if (opt.resume) {
      resume();
    } else {
      K3_CHECK_CTX(list_checkpoints(run_dir_).empty(), (ErrorContext{run_dir_, "", -1}),
                   "the run directory already holds checkpoints: pass --resume to continue it, or "
                   "choose another run.dir");
      s_->model->initialize(static_cast<uint64_t>(config.model.seed));
    }
    write_file_atomic(run_dir_ + "/config.toml", to_toml(config));
    write_file_atomic(run_dir_ + "/model.json", model_config_to_json(s_->model->config()).dump(2) + "\n");
    metrics_ = std::make_unique<MetricsWriter>(run_dir_, opt.resume ? step_ : -1);
    peak_gflops_ = fma_peak_gflops();
  }

  TrainSummary run();

 private:
  void resume();
  double train_step();  // one optimizer step; returns the mean loss (NaN when skipped)
  void evaluate_now(nlohmann::json& record);
  void balance_experts(nlohmann::json& record);
  std::string checkpoint_now();
  std::string plot();
  void say(const std::string& text) {
    if (progress_) progress_->message(text);
  }

  TrainOptions opt_;
  std::unique_ptr<Session> s_;
  Optimizer optimizer_;  // before the data: a bad rule is reported before the dataset loads
  Schedule schedule_;
  data::TokenDataset dataset_;
  data::Batcher batcher_;
  StepGuard guard_;
  std::string run_dir_;
  std::unique_ptr<ProgressDisplay> progress_;  // null when quiet
  std::unique_ptr<MetricsWriter> metrics_;
  int64_t step_ = 0;
  double peak_gflops_ = 0, last_grad_norm_ = NAN, last_val_loss_ = NAN;
  std::string last_checkpoint_;
  std::vector<data::Batch> micro_;
};

void Run::resume() {
  const std::string dir = find_checkpoint(run_dir_);
  Checkpoint ck = load_checkpoint(dir);
  restore_weights(*s_->model, ck, dir);
  restore_optimizer(optimizer_, ck, dir);
  step_ = ck.manifest.at("step").get<int64_t>();
  guard_.set_skipped(ck.manifest.value("skipped_steps", int64_t{0}));
  batcher_.seek(data::DataCursor::parse(ck.manifest.at("data_cursor").get<std::string>()));
  last_checkpoint_ = dir;
  say("resumed from " + dir + " at step " + std::to_string(step_));
}

double Run::train_step() {
  const RunConfig& c = s_->config;
  Model& model = *s_->model;
  // Fetch every micro-batch first: the gradient is of the mean over all their counted tokens.
  micro_.resize(static_cast<size_t>(c.train.grad_accum));
  int64_t count = 0;
  for (auto& b : micro_) {
    batcher_.next(b);
    for (int32_t t : b.targets) count += t != model.config().ignore_index;
  }
  model.params().zero_grads();
  double loss_sum = 0;
  const float grad_scale = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  for (auto& b : micro_) {
    ProfileScope time(kStepBucket);
    kernels::LossSum l = model.forward_backward(s_->arena, s_->acts,
                                                {b.inputs.data(), b.targets.data(), b.rows, b.seq_len}, grad_scale);
    loss_sum += l.sum;
  }
  const double loss = count > 0 ? loss_sum / static_cast<double>(count) : NAN;
  last_grad_norm_ = global_grad_norm(model.params().grads(), model.params().flat_size());
  if (!guard_.admit(loss, last_grad_norm_)) {
    say(strprintf("step %lld: non-finite loss (%g) or gradient norm (%g): step skipped, nothing applied",
                  static_cast<long long>(step_ + 1), loss, last_grad_norm_));
    return NAN;
  }
  ProfileScope time(kOptimizerBucket);
  optimizer_.step(schedule_.lr(step_), clip_factor(last_grad_norm_, c.train.grad_clip));
  return loss;
}

// Quantile Balancing once per global batch; per-layer load figures go to metrics.jsonl and the
// full per-expert loads to expert_load.jsonl (drawn by `k3lab report`).
void Run::balance_experts(nlohmann::json& record) {
  const std::map<int64_t, ExpertLoadStats> stats = s_->model->end_global_batch();
  if (stats.empty()) return;
  double worst = 0;
  for (auto& [layer, st] : stats) {
    const std::string l = std::to_string(layer);
    record["moe.maxvio." + l] = st.maxvio;
    record["moe.min_load." + l] = st.min_load;
    record["moe.max_load." + l] = st.max_load;
    record["moe.idle." + l] = st.idle;
    worst = std::max(worst, st.maxvio);
  }
  record["moe.maxvio"] = worst;
  append_expert_load(run_dir_, step_, stats);
}

void Run::evaluate_now(nlohmann::json& record) {
  EvalResult e = evaluate(*s_, dataset_.validation, s_->config.eval.batches);
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
                             {"optimizer", optimizer_.summary()},
                             {"optimizer_steps", optimizer_.steps_taken()},
                             {"skipped_steps", guard_.skipped()},
                             {"data_cursor", batcher_.cursor().to_string()},
                             {"seed", s_->config.model.seed},
                             {"rng", "philox4x32-10; stateless, keyed by (seed, stream, index)"},
                             {"layout", {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"ep", 1}, {"cp", 1}}},
                             {"model_config", model_config_to_json(s_->model->config())},
                             {"run_config", to_toml(s_->config)}};
  last_checkpoint_ = save_checkpoint(run_dir_, step_, make_checkpoint(*s_->model, &optimizer_, manifest),
                                     static_cast<int>(s_->config.checkpoint.keep_last));
  return last_checkpoint_;
}

std::string Run::plot() {
  auto m = read_metrics(metrics_path(run_dir_));
  LinePlot p;
  p.title = "k3lab: " + s_->config.run.name;
  p.x_label = "step";
  p.y_label = "loss (nats/token)";
  for (auto [key, label] : {std::pair{"loss", "train"}, {"val_loss", "validation"}})
    if (m.count(key)) p.series.push_back({label, m[key].steps, m[key].values});
  if (std::isfinite(s_->loss_floor) && m.count("loss") && !m["loss"].steps.empty())
    p.series.push_back({"entropy floor", {m["loss"].steps.front(), m["loss"].steps.back()},
                        {s_->loss_floor, s_->loss_floor}});
  const std::string path = run_dir_ + "/loss.svg";
  write_svg(path, render_line_plot(p));
  return path;
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
  while (step_ < c.train.steps) {
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
    balance_experts(rec);
    if (c.eval.every > 0 && (step_ % c.eval.every == 0 || step_ == c.train.steps)) evaluate_now(rec);
    metrics_->write(rec);
    if (progress_) {
      const double elapsed = since_start.seconds();
      progress_->update({step_, c.train.steps, loss, s_->loss_floor, schedule_.lr(step_ - 1), tok_s,
                        elapsed / static_cast<double>(step_ - first_step) *
                            static_cast<double>(c.train.steps - step_)});
    }
    if (c.sample.every > 0 && step_ % c.sample.every == 0 && step_ != c.train.steps)
      say("sample: " + sample_text(*s_, c.sample.prompt, c.sample.max_tokens, c.sample.temperature,
                                   c.sample.top_k, c.sample.top_p, static_cast<uint64_t>(step_)));
    if ((c.checkpoint.every > 0 && step_ % c.checkpoint.every == 0) || step_ == c.train.steps)
      checkpoint_now();
  }
  if (progress_) progress_->finish();
  out.steps = step_;
  out.validation_loss = last_val_loss_;
  out.last_checkpoint = last_checkpoint_;
  out.loss_plot = plot();
  if (c.sample.max_tokens > 0)
    out.sample = sample_text(*s_, c.sample.prompt, c.sample.max_tokens, c.sample.temperature,
                             c.sample.top_k, c.sample.top_p, static_cast<uint64_t>(step_));
  return out;
}

}  // namespace

TrainSummary train(const RunConfig& config, const TrainOptions& options) {
  PreflightResult checked = preflight(config);
  if (checked.threads > 0) set_num_threads(checked.threads);
  Run run(config, options, std::move(checked.dataset));
  return run.run();
}

}  // namespace k3::train
