// What train, eval and sample share: the model, tokenizer and step memory built from a resolved
// run configuration, and the conversions between a model (+ optimizer) and a checkpoint.
#pragma once

#include <cmath>
#include <memory>
#include <string>

#include "k3/activation/manager.h"
#include "k3/base/arena.h"
#include "k3/data/dataset.h"
#include "k3/data/tokenizer.h"
#include "k3/model/model.h"
#include "k3/optim/optimizer.h"
#include "k3/train/checkpoint.h"
#include "k3/train/run_config.h"

namespace k3::train {

// The step arena reserves address space only: the pages one micro-batch touches are faulted in
// by the first step and reused by every later one (allocate once, reuse).
constexpr size_t kStepArenaReserve = size_t{64} << 30;
Arena step_arena();

struct Session {
  RunConfig config;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<Model> model;
  Arena arena;  // step memory: activations and scratch of one micro-batch
  ActivationManager acts;
  double loss_floor = NAN;  // nats per token when the data's entropy is known (the built-in corpus)
};

std::unique_ptr<data::Tokenizer> run_tokenizer();  // the tokenizer every run uses

// The run's model configuration, read and checked against the tokenizer and data.seq_len.
ModelConfig load_run_model_config(const RunConfig& config, const data::Tokenizer& tokenizer);

// Builds the session for a run configuration (its paths already resolved): model config read and
// checked against the tokenizer, parameters allocated (not initialized), step arena mapped.
std::unique_ptr<Session> open_session(const RunConfig& config);

// The session of a checkpoint: the run configuration stored in its manifest, weights loaded.
std::unique_ptr<Session> open_checkpoint_session(const std::string& checkpoint_path);

data::TokenDataset load_run_dataset(const RunConfig& config, const data::Tokenizer& tokenizer);

// The parameters as the optimizer sees them (named ranges of the flat buffers).
ParamSet param_set(const ParamRegistry& params);
// The head block sizes Per-Head Muon splits projections into (optim/routing.h).
HeadSizes head_sizes(const ModelConfig& c);

// Weights by K3 name (views of the flat buffer) and optimizer state.
Checkpoint make_checkpoint(const Model& model, const Optimizer* optimizer, nlohmann::json manifest);
// Copies checkpoint weights into the model; every parameter must be present with its shape.
void restore_weights(Model& model, const Checkpoint& ck, const std::string& origin);
void restore_optimizer(Optimizer& optimizer, const Checkpoint& ck, const std::string& origin);

}  // namespace k3::train
