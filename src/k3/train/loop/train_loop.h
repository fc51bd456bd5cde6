// The training loop of one run, or of one phase of a curriculum: each step's micro-batches from
// the batch source, the step engine's step, then the components that act after it, each deciding
// for itself when: recorders (metrics.jsonl), evaluation, progress, checkpoints, samples, and the
// stop that a signal asks for, agreed by every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "k3/base/stop_signals.h"
#include "k3/data/dataset.h"
#include "k3/dist/grid.h"
#include "k3/train/checkpoint/checkpointer.h"
#include "k3/train/checkpoint/resume.h"
#include "k3/train/eval/evaluator.h"
#include "k3/train/eval/sampler.h"
#include "k3/train/loop/batches.h"
#include "k3/train/loop/peer_loss.h"
#include "k3/train/loop/step_engine.h"
#include "k3/train/loop/trainer.h"
#include "k3/train/observe/comm_recorder.h"
#include "k3/train/observe/expert_load_recorder.h"
#include "k3/train/observe/memory_recorder.h"
#include "k3/train/observe/metrics.h"
#include "k3/train/observe/progress.h"
#include "k3/train/observe/timeline_recorder.h"

namespace k3::train {

class TrainLoop {
 public:
  // A new run (FROM null) or one resumed from a checkpoint, on the data the pre-flight checks
  // loaded. The caller holds the run directory. WHOLE_RUN is the run as configured; CONFIG what
  // it trains with until its end step: under a curriculum, phase PHASE's (curriculum.h), else the
  // same. Every rank of the job builds one; the lead (world rank 0) alone prints and writes files.
  TrainLoop(const RunConfig& whole_run, int phase, const RunConfig& config,
            const model::ModelConfig& model, const TrainOptions& options, const StopSignals& stop,
            data::TokenDataset dataset, ResumePoint* from, const dist::ProcessGrid& grid);

  TrainSummary run();

 private:
  void start();                    // a new run: initialized weights, config files, history
  void resume(ResumePoint& from);  // the checkpoint's state; the history says so
  void begin_phase();              // says so, and records it in the history
  nlohmann::json step_record(const StepResult& r, double seconds, double tokens_per_second) const;
  void evaluate(nlohmann::json& rec);
  void show_progress(double loss, double tokens_per_second, double elapsed, int64_t first_step);
  void save();
  void stop_early(TrainSummary& out, int signal);
  int agreed_stop() const;  // the stop signal any rank received, agreed by all (0: none)
  nlohmann::json layout() const;
  void say(const std::string& text) {
    if (progress_) progress_->message(text);
  }

  const StopSignals& stop_;
  const dist::ProcessGrid& grid_;
  const bool lead_;
  const std::string run_dir_;
  const int phase_;         // of the curriculum, or -1
  const int64_t end_step_;  // where this loop stops: the phase's end, or train.steps
  std::unique_ptr<Session> s_;
  Sampler sampler_;    // before the engine: a [sample] that cannot fit is reported first
  StepEngine engine_;  // before the data: a bad optimizer rule is reported first
  data::TokenDataset dataset_;
  nlohmann::json data_fingerprint_;  // of the data the run started with, kept in checkpoints
  BatchSource batches_;
  Evaluator evaluator_;
  Checkpointer checkpointer_;
  std::unique_ptr<ProgressDisplay> progress_;  // null when quiet
  std::unique_ptr<MetricsWriter> metrics_;     // the lead's
  CommRecorder comm_;
  MemoryRecorder memory_;
  ExpertLoadRecorder experts_;
  TimelineRecorder timeline_;
  // In this order: the communication recorder reads the counters when it records, so the
  // collectives of the recorders before it (expert load, timeline) count in this step's figures,
  // and the memory gather after it in the next step's.
  std::vector<Recorder*> recorders_;
  PeerLossNote peer_loss_;
  double peak_gflops_ = 0;      // of this machine's fp32 FMA units
  double flops_per_token_ = 0;  // the model's training FLOPs per token at data.seq_len
  int64_t step_ = 0;            // steps completed
};

}  // namespace k3::train
