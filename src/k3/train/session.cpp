#include "k3/train/session.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/data/corpus_entropy.h"

namespace k3::train {

Arena step_arena() { return Arena(kStepArenaReserve, /*prefault=*/false); }

std::unique_ptr<data::Tokenizer> run_tokenizer() { return data::make_tokenizer("byte"); }

ModelConfig load_run_model_config(const RunConfig& config, const data::Tokenizer& tokenizer) {
  ModelConfig mc = load_model_config(config.model.config);
  K3_CHECK_CTX(mc.vocab_size >= tokenizer.vocab_size(),
               (ErrorContext{config.model.config, "vocab_size", -1}), "the ", tokenizer.name(),
               " tokenizer needs a vocabulary of at least ", tokenizer.vocab_size(), ", found ",
               mc.vocab_size);
  K3_CHECK_CTX(config.data.seq_len <= mc.max_position_embeddings,
               (ErrorContext{"", "data.seq_len", -1}), "seq_len ", config.data.seq_len,
               " exceeds the model's max_position_embeddings ", mc.max_position_embeddings);
  return mc;
}

std::unique_ptr<Session> open_session(const RunConfig& config) {
  auto s = std::make_unique<Session>();
  s->config = config;
  s->tokenizer = run_tokenizer();
  s->model = std::make_unique<Model>(load_run_model_config(config, *s->tokenizer));
  s->arena = step_arena();
  if (config.data.source == "builtin") s->loss_floor = data::corpus_entropy_nats_per_token();
  return s;
}

std::unique_ptr<Session> open_checkpoint_session(const std::string& checkpoint_path) {
  const std::string dir = find_checkpoint(checkpoint_path);
  Checkpoint ck = load_checkpoint(dir);
  K3_CHECK_CTX(ck.manifest.contains("run_config"), (ErrorContext{dir, "run_config", -1}),
               "the manifest does not hold the run configuration");
  RunConfig rc = parse_run_config(ck.manifest["run_config"].get<std::string>(), dir + "/manifest.json");
  auto s = open_session(rc);
  restore_weights(*s->model, ck, dir);
  return s;
}

data::TokenDataset load_run_dataset(const RunConfig& config, const data::Tokenizer& tokenizer) {
  data::DatasetSpec spec;
  spec.source = config.data.source == "builtin" ? "corpus" : config.data.source;
  spec.seed = static_cast<uint64_t>(config.model.seed);
  spec.corpus_tokens = config.data.builtin_tokens;
  spec.validation_fraction = config.data.val_fraction;
  return data::load_dataset(spec, tokenizer);
}

ParamSet param_set(const ParamRegistry& params) {
  ParamSet set;
  for (int i = 0; i < params.size(); ++i)
    set.slots.push_back({params.info(i).name, params.info(i).shape, params.info(i).offset});
  set.values = params.values();
  set.grads = params.grads();
  set.flat_size = params.flat_size();
  return set;
}

HeadSizes head_sizes(const ModelConfig& c) {
  return {c.kda_head_dim, c.qk_nope_head_dim + c.qk_rope_head_dim, c.qk_nope_head_dim + c.v_head_dim,
          c.v_head_dim, c.head_dim};
}

// Every parameter's values under its K3 name, as views.
static std::vector<std::pair<std::string, Tensor>> weight_views(const Model& model) {
  std::vector<std::pair<std::string, Tensor>> weights;
  const ParamRegistry& p = model.params();
  for (int i = 0; i < p.size(); ++i) weights.emplace_back(p.info(i).name, p.value(i));
  return weights;
}

Checkpoint make_checkpoint(const Model& model, const Optimizer* optimizer, nlohmann::json manifest) {
  Checkpoint ck;
  ck.model = weight_views(model);
  for (auto& entry : model.balancer_state()) ck.model.push_back(std::move(entry));
  if (optimizer) ck.optimizer = optimizer->state_tensors();
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
                 (ErrorContext{origin, name, -1}), "checkpoint holds ", dtype_name(src.dtype()), " ",
                 shape_str(src.shape()), ", the model expects ", dtype_name(dst.dtype()), " ",
                 shape_str(dst.shape()));
    std::memcpy(dst.data(), src.data(), dst.nbytes());
  }
}

void restore_weights(Model& model, const Checkpoint& ck, const std::string& origin) {
  copy_named(weight_views(model), ck.model, origin);
  model.restore_balancer_state(ck.model, origin);
}

void restore_optimizer(Optimizer& optimizer, const Checkpoint& ck, const std::string& origin) {
  copy_named(optimizer.state_tensors(), ck.optimizer, origin);
  K3_CHECK_CTX(ck.manifest.contains("optimizer_steps"), (ErrorContext{origin, "optimizer_steps", -1}),
               "missing from the manifest");
  optimizer.set_steps_taken(ck.manifest["optimizer_steps"].get<int64_t>());
}

}  // namespace k3::train
