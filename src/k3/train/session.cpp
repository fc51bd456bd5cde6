#include "k3/train/session.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/log.h"
#include "k3/train/loss_plot.h"

namespace k3::train {

Arena step_arena() { return Arena(kStepArenaReserve, /*prefault=*/false); }

std::unique_ptr<data::Tokenizer> run_tokenizer() { return data::make_tokenizer("byte"); }

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
  s->config = config;
  s->tokenizer = run_tokenizer();
  check_model_for_run(model, config, *s->tokenizer);
  s->model = std::make_unique<model::Model>(model, /*allocate=*/true, grid);
  s->arena = step_arena();
  s->loss_floor = data_loss_floor(config);
  return s;
}

CheckpointConfigs checkpoint_configs(const Checkpoint& ck, const std::string& dir) {
  auto text = [&](const char* file) -> const std::string& {
    auto it = ck.texts.find(file);
    K3_CHECK_CTX(it != ck.texts.end(), (ErrorContext{dir, file, -1}),
                 "missing from the checkpoint: it cannot stand alone");
    return it->second;
  };
  const std::string model_path = dir + "/" + kModelConfigFile;
  nlohmann::json model_json;
  try {
    model_json = nlohmann::json::parse(text(kModelConfigFile));
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed JSON (") + e.what() + ")", ErrorContext{model_path, "", -1});
  }
  return {parse_run_config(text(kRunConfigFile), dir + "/" + kRunConfigFile),
          model::parse_model_config(model_json, model_path)};
}

std::unique_ptr<Session> open_checkpoint_session(const std::string& checkpoint_path) {
  FoundCheckpoint found = load_newest_valid(checkpoint_path, CheckpointParts::model_only);
  for (const SkippedCheckpoint& s : found.skipped) log_warn("skipped checkpoint ", s.describe());
  CheckpointConfigs configs = checkpoint_configs(found.checkpoint, found.dir);
  auto s = open_session(configs.run, configs.model);
  restore_weights(*s->model, found.checkpoint, found.dir);
  return s;
}

nlohmann::json data_fingerprint(const data::TokenDataset& ds) {
  Sha256 hash;
  for (const std::vector<int32_t>* stream : {&ds.train, &ds.validation})
    hash.update({reinterpret_cast<const char*>(stream->data()), stream->size() * sizeof(int32_t)});
  return {{"source", ds.source},
          {"train_tokens", ds.train.size()},
          {"validation_tokens", ds.validation.size()},
          {"sha256", hash.hex_digest()}};
}

data::TokenDataset load_run_dataset(const RunConfig& config, const data::Tokenizer& tokenizer) {
  data::DatasetSpec spec;
  spec.source = config.data.source == "builtin" ? "corpus" : config.data.source;
  spec.seed = static_cast<uint64_t>(config.data.seed);
  spec.corpus_tokens = config.data.builtin_tokens;
  spec.validation_fraction = config.data.val_fraction;
  return data::load_dataset(spec, tokenizer);
}

// Every parameter's values under its K3 name, as views.
static std::vector<std::pair<std::string, Tensor>> weight_views(const model::Model& model) {
  std::vector<std::pair<std::string, Tensor>> weights;
  const model::ParamRegistry& p = model.params();
  for (int i = 0; i < p.size(); ++i) weights.emplace_back(p.info(i).name, p.value(i));
  return weights;
}

Checkpoint make_checkpoint(const Session& s,
                           std::vector<std::pair<std::string, Tensor>> optimizer_state,
                           nlohmann::json manifest) {
  Checkpoint ck;
  ck.model = weight_views(*s.model);
  for (auto& entry : s.model->balancer_state()) ck.model.push_back(std::move(entry));
  ck.optimizer = std::move(optimizer_state);
  ck.texts[kModelConfigFile] = model::model_config_to_json(s.model->config()).dump(2) + "\n";
  ck.texts[kRunConfigFile] = to_toml(s.config);
  ck.manifest = std::move(manifest);
  return ck;
}

// Copies each named tensor of `from` into the tensor of the same name in `into`.
static void copy_named(const std::vector<std::pair<std::string, Tensor>>& into,
                       const std::vector<std::pair<std::string, Tensor>>& from,
                       const std::string& origin) {
  std::unordered_map<std::string, const Tensor*> by_name;
  for (auto& [name, t] : from) by_name[name] = &t;
  for (auto& [name, dst] : into) {
    auto it = by_name.find(name);
    K3_CHECK_CTX(it != by_name.end(), (ErrorContext{origin, name, -1}),
                 "tensor missing from the checkpoint");
    const Tensor& src = *it->second;
    K3_CHECK_CTX(src.shape() == dst.shape() && src.dtype() == dst.dtype(),
                 (ErrorContext{origin, name, -1}), "checkpoint holds ", dtype_name(src.dtype()),
                 " ", shape_str(src.shape()), ", the model expects ", dtype_name(dst.dtype()), " ",
                 shape_str(dst.shape()));
    std::memcpy(dst.data(), src.data(), dst.nbytes());
  }
}

void restore_weights(model::Model& model, const Checkpoint& ck, const std::string& origin) {
  copy_named(weight_views(model), ck.model, origin);
  model.restore_balancer_state(ck.model, origin);
}

const Tensor& optimizer_tensor(const Checkpoint& ck, const std::string& name,
                               const std::string& origin) {
  for (const auto& [n, t] : ck.optimizer)
    if (n == name) return t;
  throw Error("tensor missing from the checkpoint", ErrorContext{origin, name, -1});
}

}  // namespace k3::train
