#include "k3/train/session.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/log.h"
#include "k3/data/shards/shard_set.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/config/parallel.h"
#include "k3/train/loop/image_text_data.h"
#include "k3/train/observe/loss_plot.h"

namespace k3::train {

Arena step_arena() { return Arena(kStepArenaReserve, /*prefault=*/false); }

std::unique_ptr<data::Tokenizer> run_tokenizer(const RunConfig& config) {
  try {
    return data::make_tokenizer(config.data.tokenizer);
  } catch (const Error& e) {
    throw e.with_field("data.tokenizer");
  }
}

void check_model_for_run(const model::ModelConfig& mc, const RunConfig& config,
                         const data::Tokenizer& tokenizer) {
  K3_CHECK_CTX(mc.vocab_size >= tokenizer.vocab_size(), (ErrorContext{mc.source, "vocab_size", -1}),
               "the ", tokenizer.name(), " tokenizer needs a vocabulary of at least ",
               tokenizer.vocab_size(), ", found ", mc.vocab_size);
  K3_CHECK_CTX(config.data.seq_len <= mc.max_position_embeddings,
               (ErrorContext{"", "data.seq_len", -1}), "seq_len ", config.data.seq_len,
               " exceeds the model's max_position_embeddings ", mc.max_position_embeddings);
}

std::unique_ptr<Session> open_session(const RunConfig& config, const model::ModelConfig& model,
                                      const dist::ProcessGrid& grid) {
  auto s = std::make_unique<Session>();
  s->config = s->whole_run = config;
  s->tokenizer = run_tokenizer(config);
  check_model_for_run(model, config, *s->tokenizer);
  // The run's pipeline split, or, for a command on another layout than the run's (evaluating or
  // sampling a checkpoint), the even split over its grid.
  const int64_t layers = model.num_hidden_layers;
  s->model = std::make_unique<model::Model>(
      model, /*allocate=*/true, grid,
      grid.dims().pp == config.parallel.pp ? pipeline_split(config.parallel, layers)
                                           : model::PipelineSplit::make(layers, grid.dims().pp));
  s->model->set_precision(config.train.gemm_precision());
  s->arena = step_arena();
  s->loss_floor = data_loss_floor(config);
  return s;
}

std::unique_ptr<Session> open_checkpoint_session(const std::string& checkpoint_path,
                                                 const dist::ProcessGrid& grid) {
  FoundCheckpoint found = load_newest_valid(checkpoint_path, CheckpointParts::model_only);
  for (const SkippedCheckpoint& s : found.skipped) log_warn("skipped checkpoint ", s.describe());
  CheckpointConfigs configs = checkpoint_configs(found.checkpoint, found.dir);
  auto s = open_session(configs.run, configs.model, grid);
  restore_weights(*s->model, found.checkpoint, found.dir);
  return s;
}

nlohmann::json data_fingerprint(const data::TokenDataset& ds) {
  std::string sha256;
  if (ds.shards) {
    sha256 = ds.shards->manifest_sha256();
  } else {
    Sha256 hash;
    for (const std::vector<int32_t>* stream : {&ds.train, &ds.validation})
      hash.update(
          {reinterpret_cast<const char*>(stream->data()), stream->size() * sizeof(int32_t)});
    sha256 = hash.hex_digest();
  }
  return {{"source", ds.source},
          {"train_tokens", ds.train_tokens().size()},
          {"validation_tokens", ds.validation_tokens().size()},
          {"sha256", sha256}};
}

data::TokenDataset load_run_dataset(const RunConfig& config, const data::Tokenizer& tokenizer) {
  // Drawn batch by batch as the run goes (image_text_data.h): no token streams.
  if (image_text_source(config))
    return {"image-text corpus (seed " + std::to_string(config.data.seed) + ")", {}, {}, 0, 0, {}};
  const bool shards = config.data.source == "shards";
  K3_CHECK_CTX(shards == !config.data.path.empty(), (ErrorContext{"", "data.path", -1}),
               shards ? "data.source = \"shards\" reads the shard directory data.path: set it"
                      : "data.path is read only when data.source = \"shards\"");
  if (shards) return data::shard_dataset(config.data.path, tokenizer);
  data::DatasetSpec spec;
  spec.source = config.data.source == "builtin" ? "corpus" : config.data.source;
  spec.seed = static_cast<uint64_t>(config.data.seed);
  spec.corpus_tokens = config.data.builtin_tokens;
  spec.validation_fraction = config.data.val_fraction;
  return data::load_dataset(spec, tokenizer);
}

}  // namespace k3::train
