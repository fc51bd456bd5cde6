// A run's model and optimizer to and from the checkpoint format (checkpoint.h), on any layout:
// saving, every tensor gathered in global coordinates from the ranks' shards over tp, ep and pp;
// loading, each rank's shard copied out of the global tensor; and the configurations a checkpoint
// carries beside its weights.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "k3/model/model.h"
#include "k3/parallel/zero/sharded_optimizer.h"
#include "k3/train/checkpoint/checkpoint.h"
#include "k3/train/config/run_config.h"
#include "k3/train/session.h"

namespace k3::train {

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
