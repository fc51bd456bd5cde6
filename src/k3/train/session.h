// What train, eval and sample share: the model, tokenizer and step memory built from a resolved
// run configuration, and the conversions between a model (+ optimizer) and a checkpoint.
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
#include "k3/optim/optimizer.h"
#include "k3/parallel/pipeline/schedule.h"
#include "k3/parallel/zero/sharded_optimizer.h"
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
// The pipeline's split of a model of `layers` layers: parallel.pp × parallel.vp virtual stages,
// parallel.pp_layers counts or even (refused in one line naming the field otherwise).
model::PipelineSplit pipeline_split(const ParallelSection& p, int64_t layers);
// parallel.pp_schedule, with "auto" resolved.
parallel::pipeline::ScheduleKind pipeline_schedule(const ParallelSection& p);
// Where a vision tower's forward runs under pp (parallel.pp_fillers).
parallel::pipeline::Fillers pipeline_fillers(const ParallelSection& p);

std::unique_ptr<Session> open_session(const RunConfig& config, const model::ModelConfig& model,
                                      const dist::ProcessGrid& grid = dist::single_process());

// A checkpoint carries its resolved configurations as files beside the weights, so evaluating,
// sampling or resuming it never reads the files the run was started from.
inline constexpr const char* kModelConfigFile = "config.json";    // Hugging Face style
inline constexpr const char* kRunConfigFile = "run_config.toml";  // to_toml of the RunConfig

struct CheckpointConfigs {
  RunConfig run;
  model::ModelConfig model;
};
// The configurations a checkpoint (loaded from DIR) was written with.
CheckpointConfigs checkpoint_configs(const Checkpoint& ck, const std::string& dir);

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

// The sources of a checkpoint: the weights by K3 name in global shapes (each parameter's fill
// is global_weight), the Quantile Balancing ranges, then OPTIMIZER_STATE (global tensors by name,
// as optim::Optimizer::state_tensors names them; empty for none); and the session's
// configurations as the checkpoint's config files.
CheckpointContents make_checkpoint(const Session& s, std::vector<TensorSource> optimizer_state,
                                   nlohmann::json manifest);
// The optimizer's state tensors as sources, each gathered in global coordinates on its own when
// the save comes to it (collective over the optimizer's state group). Under expert parallelism
// the routed experts' state lives on their owners: the list names every ep rank's (the dense
// tensors, then each ep rank's experts in rank order; the names travel once over ep), and each
// expert tensor is broadcast from its owner, so every rank walks the same list. Under pipeline
// parallelism each pp rank lists its stage's tensors so (the names travel once over pp), and each
// is broadcast over pp from the stage that holds it.
std::vector<TensorSource> optimizer_sources(const parallel::ShardedOptimizer& optimizer,
                                            const model::Model& model);
// Parameter I's global values into OUT (numel floats). A parameter split over tp is gathered
// over the model's tp group, and a routed expert under expert parallelism over ep, so every rank
// of those groups must call it for the same I; a whole one (replicated, or one rank) is copied.
// Under pipeline parallelism a stage's tensor is gathered within the stage, then broadcast over
// pp, so every rank of the job calls it for the same I.
void global_weight(const model::Model& model, int i, float* out);
// Reads each parameter's global tensor from the checkpoint into one buffer (the largest
// parameter's size) and copies this rank's shard of it into the model, so that a checkpoint loads
// under any layout; then the Quantile Balancing ranges. Every parameter must be present with its
// global shape.
void restore_weights(model::Model& model, const Checkpoint& ck, const std::string& origin);
// A `find` for ShardedOptimizer::restore_state: reads the checkpoint's optimizer tensor of that
// name into one buffer, reused (grown to the largest tensor asked for), and returns it. The
// pointer is valid until the next call. A missing tensor is an Error naming it and ORIGIN.
std::function<const Tensor*(const std::string& name)> optimizer_state_reader(
    const Checkpoint& ck, const std::string& origin);

}  // namespace k3::train
