// What train, eval and sample share: the model, tokenizer and step memory built from a resolved
// run configuration, the run's data, and a checkpoint opened as a session (its model to and from
// the checkpoint format: checkpoint/sharded.h).
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/data/dataset.h"
#include "k3/data/tokenizer.h"
#include "k3/model/model.h"
#include "k3/train/config/run_config.h"

namespace k3::train {

// The step arena reserves address space only: the pages one micro-batch touches are faulted in
// by the first step and reused by every later one (allocate once, reuse).
constexpr size_t kStepArenaReserve = size_t{64} << 30;
Arena step_arena();

struct Session {
  RunConfig config;     // what the session runs: under a curriculum, the current phase's
  RunConfig whole_run;  // the run as configured, its curriculum included: what checkpoints keep
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<model::Model> model;
  Arena arena;  // step memory: activations and scratch of one micro-batch
  activation::ActivationManager acts;
  double loss_floor = NAN;  // nats per token when the data's entropy is known (the built-in corpus)
};

// The run's tokenizer, data.tokenizer.
std::unique_ptr<data::Tokenizer> run_tokenizer(const RunConfig& config);

// Refuses a model configuration the run cannot use: a vocabulary smaller than the tokenizer's,
// a context shorter than data.seq_len.
void check_model_for_run(const model::ModelConfig& model, const RunConfig& config,
                         const data::Tokenizer& tokenizer);

// Builds the session of a run configuration and a model configuration (checked as above):
// parameters allocated (not initialized), step arena mapped. `grid` must outlive the session.
std::unique_ptr<Session> open_session(const RunConfig& config, const model::ModelConfig& model,
                                      const dist::ProcessGrid& grid = dist::single_process());

// The session of a checkpoint (a step directory, or a run directory's newest valid one): its
// own configurations, its weights (this rank's shards on `grid`, which must outlive the session);
// the optimizer state is not read.
std::unique_ptr<Session> open_checkpoint_session(
    const std::string& checkpoint_path, const dist::ProcessGrid& grid = dist::single_process());

// The run's data: data.source (for "shards", the directory data.path) read with the run's
// tokenizer.
data::TokenDataset load_run_dataset(const RunConfig& config, const data::Tokenizer& tokenizer);

// What identifies a run's data: source, token counts and a SHA-256: of the token streams held in
// memory, or for shards of their manifest (which holds each shard's SHA-256), so that a run over
// gigabytes of shards does not read them all at each start.
nlohmann::json data_fingerprint(const data::TokenDataset& ds);

}  // namespace k3::train
