#include "k3/train/checkpoint/sharded.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "k3/base/error.h"

namespace k3::train {

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

namespace {

// Every ep rank's list of (name, shape) of its routed experts' state tensors: one all-gather of
// the sizes, one of the text ("name d0 d1 ...\n" per tensor, as int32 characters).
std::vector<std::vector<std::pair<std::string, Shape>>> owned_state_lists(
    const std::vector<std::pair<std::string, Shape>>& mine, const dist::Comm& ep) {
  std::string text;
  for (const auto& [name, shape] : mine) {
    text += name;
    for (int64_t d : shape) (text += ' ') += std::to_string(d);
    text += "\n";
  }
  std::vector<int64_t> sizes(static_cast<size_t>(ep.size()), 0);
  sizes[static_cast<size_t>(ep.rank())] = static_cast<int64_t>(text.size());
  ep.all_gather(sizes.data(), std::vector<int64_t>(sizes.size(), 1));
  std::vector<int32_t> chars;
  for (int r = 0; r < ep.size(); ++r)
    for (int64_t i = 0; i < sizes[static_cast<size_t>(r)]; ++i)
      chars.push_back(r == ep.rank() ? static_cast<int32_t>(static_cast<unsigned char>(text[i]))
                                     : 0);
  ep.all_gather(chars.data(), sizes);
  std::vector<std::vector<std::pair<std::string, Shape>>> out(static_cast<size_t>(ep.size()));
  size_t at = 0;
  for (int r = 0; r < ep.size(); ++r) {
    std::string all;
    for (int64_t i = 0; i < sizes[static_cast<size_t>(r)]; ++i)
      all += static_cast<char>(chars[at++]);
    std::istringstream lines(all);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::pair<std::string, Shape> t;
      words >> t.first;
      for (int64_t d; words >> d;) t.second.push_back(d);
      out[static_cast<size_t>(r)].push_back(std::move(t));
    }
  }
  return out;
}

// Parameter i, which this rank holds (its tp shard, gathered over tp when split), whole.
void whole_weight(const model::Model& model, int i, float* out) {
  const model::ParamRegistry& params = model.params();
  const model::ParamInfo& p = params.info(i);
  if (p.local_numel() == p.numel()) {
    model::copy_shard_to_global(p, params.value(i).f32(), out);
    return;
  }
  K3_CHECK_CTX(p.shard.group == "tp", (ErrorContext{"", p.name, -1}), "split over group ",
               p.shard.group, ": only shards over tp are gathered");
  // Every element comes from exactly one rank's shard and zeros elsewhere: an exact sum.
  std::fill(out, out + p.numel(), 0.f);
  model::copy_shard_to_global(p, params.value(i).f32(), out);
  model.grid().tp().all_reduce(out, p.numel());
}

// Parameter i of this rank's pipeline stage, whole: a routed expert gathered by its ep owner,
// then broadcast over ep.
void stage_weight(const model::Model& model, int i, float* out) {
  const model::ParamInfo& p = model.params().info(i);
  const dist::Comm& ep = model.grid().ep();
  if (p.shard.expert_owned() && ep.size() > 1) {
    if (p.held()) whole_weight(model, i, out);
    ep.broadcast(out, p.numel(), p.shard.ep_owner);
    return;
  }
  whole_weight(model, i, out);
}

}  // namespace

namespace {

// The sources of this pipeline stage's state tensors (every tensor without pipeline parallelism):
// routed experts' from their ep owner.
std::vector<TensorSource> stage_optimizer_sources(const parallel::ShardedOptimizer& optimizer,
                                                  const model::Model& model) {
  std::vector<TensorSource> out;
  const auto& parts = optimizer.state_parts();
  const dist::Comm& ep = model.grid().ep();
  // A state tensor is named "<kind>.<parameter>".
  const auto expert = [&](const std::string& state) {
    const int i = model.params().find(state.substr(state.find('.') + 1));
    return ep.size() > 1 && i >= 0 && model.params().info(i).shard.expert_owned();
  };
  std::vector<std::pair<std::string, Shape>> owned;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (expert(parts[i].name)) {
      owned.emplace_back(parts[i].name, parts[i].shape);
      index[parts[i].name] = i;
      continue;
    }
    out.push_back({parts[i].name, parts[i].shape,
                   [&optimizer, i](float* values) { optimizer.gather_state_into(i, values); }});
  }
  if (ep.size() == 1) return out;
  const auto lists = owned_state_lists(owned, ep);
  for (int r = 0; r < ep.size(); ++r)
    for (const auto& [name, shape] : lists[static_cast<size_t>(r)]) {
      const int64_t n = shape_numel(shape);
      const bool mine = r == ep.rank();
      const size_t i = mine ? index.at(name) : 0;
      out.push_back({name, shape, [&optimizer, &ep, mine, i, r, n](float* values) {
                       if (mine) optimizer.gather_state_into(i, values);
                       ep.broadcast(values, n, r);
                     }});
    }
  return out;
}

}  // namespace

// Under pipeline parallelism each stage's tensors come from that stage's ranks: every pp rank
// lists its own, and a tensor is gathered within its stage, then broadcast over pp.
std::vector<TensorSource> optimizer_sources(const parallel::ShardedOptimizer& optimizer,
                                            const model::Model& model) {
  std::vector<TensorSource> stage = stage_optimizer_sources(optimizer, model);
  const dist::Comm& pp = model.grid().pp();
  if (pp.size() == 1) return stage;
  std::vector<std::pair<std::string, Shape>> mine;
  for (const TensorSource& t : stage) mine.emplace_back(t.name, t.shape);
  const auto lists = owned_state_lists(mine, pp);
  // In the order one process lists them: AdamW's pairs by parameter, then Muon's momenta.
  struct Entry {
    std::tuple<int, int, int> order;  // (momentum, parameter, exp_avg_sq)
    int rank;
    size_t k;
  };
  std::vector<Entry> entries;
  for (int r = 0; r < pp.size(); ++r)
    for (size_t k = 0; k < lists[static_cast<size_t>(r)].size(); ++k) {
      const std::string& name = lists[static_cast<size_t>(r)][k].first;
      const std::string kind = name.substr(0, name.find('.'));
      entries.push_back({{kind == "momentum", model.params().find(name.substr(kind.size() + 1)),
                          kind == "exp_avg_sq"},
                         r,
                         k});
    }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.order < b.order; });
  auto held = std::make_shared<std::vector<TensorSource>>(std::move(stage));
  std::vector<TensorSource> out;
  for (const Entry& e : entries) {
    const auto& [name, shape] = lists[static_cast<size_t>(e.rank)][e.k];
    const bool own = e.rank == pp.rank();
    out.push_back(
        {name, shape, [held, &pp, own, k = e.k, r = e.rank, n = shape_numel(shape)](float* values) {
           if (own) (*held)[k].fill(values);
           pp.broadcast(values, n, r);
         }});
  }
  return out;
}

void global_weight(const model::Model& model, int i, float* out) {
  const model::ParamRegistry& params = model.params();
  const model::ParamInfo& p = params.info(i);
  const dist::Comm& pp = model.grid().pp();
  if (p.shard.pp_owner >= 0 && pp.size() > 1) {  // gathered in its stage, then sent to the others
    if (pp.rank() == p.shard.pp_owner) stage_weight(model, i, out);
    pp.broadcast(out, p.numel(), p.shard.pp_owner);
    return;
  }
  stage_weight(model, i, out);
}

CheckpointContents make_checkpoint(const Session& s, std::vector<TensorSource> optimizer_state,
                                   nlohmann::json manifest) {
  CheckpointContents ck;
  const model::Model& model = *s.model;
  for (int i = 0; i < model.params().size(); ++i)
    ck.model.push_back({model.params().info(i).name, model.params().info(i).shape,
                        [&model, i](float* out) { global_weight(model, i, out); }});
  for (TensorSource& range : tensor_sources(s.model->balancer_state()))
    ck.model.push_back(std::move(range));
  ck.optimizer = std::move(optimizer_state);
  ck.texts[kModelConfigFile] = model::model_config_to_json(s.model->config()).dump(2) + "\n";
  ck.texts[kRunConfigFile] = to_toml(s.whole_run);
  ck.manifest = std::move(manifest);
  return ck;
}

void restore_weights(model::Model& model, const Checkpoint& ck, const std::string& origin) {
  const model::ParamRegistry& params = model.params();
  // Every entry is checked before any is read: a checkpoint that does not fit the model leaves
  // its weights untouched.
  std::vector<const SafetensorsEntry*> entries;
  int64_t largest = 0;
  for (int i = 0; i < params.size(); ++i) {
    const model::ParamInfo& p = params.info(i);
    const SafetensorsEntry* e = ck.model.find(p.name);
    K3_CHECK_CTX(e, (ErrorContext{origin, p.name, -1}), "tensor missing from the checkpoint");
    K3_CHECK_CTX(e->shape == p.shape && e->dtype == p.dtype, (ErrorContext{origin, p.name, -1}),
                 "checkpoint holds ", dtype_name(e->dtype), " ", shape_str(e->shape),
                 ", the model expects ", dtype_name(p.dtype), " ", shape_str(p.shape));
    entries.push_back(e);
    largest = std::max(largest, p.numel());
  }
  std::vector<float> global(static_cast<size_t>(largest));
  for (int i = 0; i < params.size(); ++i) {
    const model::ParamInfo& p = params.info(i);
    ck.model.read(*entries[static_cast<size_t>(i)], global.data());
    model::copy_shard_from_global(p, global.data(), params.values() + p.offset);
  }
  model.weights_changed();
  // The ranges are [2] each: read whole, and only where the file's entry has that shape.
  std::vector<std::pair<std::string, Tensor>> ranges;
  for (const auto& [name, now] : model.balancer_state())
    if (const SafetensorsEntry* e = ck.model.find(name); e && e->shape == now.shape())
      ranges.emplace_back(name, ck.model.tensor(*e));
  model.restore_balancer_state(ranges, origin);
}

std::function<const Tensor*(const std::string& name)> optimizer_state_reader(
    const Checkpoint& ck, const std::string& origin) {
  struct Reader {
    const Checkpoint* ck;
    std::string origin;
    std::vector<float> buffer;
    Tensor last;
  };
  return [r = std::make_shared<Reader>(Reader{&ck, origin, {}, {}})](const std::string& name) {
    const SafetensorsEntry* e = r->ck->optimizer.find(name);
    K3_CHECK_CTX(e, (ErrorContext{r->origin, name, -1}), "tensor missing from the checkpoint");
    const auto n = static_cast<size_t>(shape_numel(e->shape));
    if (r->buffer.size() < n) {  // freed first: never two buffers at once
      std::vector<float>().swap(r->buffer);
      r->buffer.resize(n);
    }
    r->ck->optimizer.read(*e, r->buffer.data());
    r->last = Tensor::view(r->buffer.data(), e->shape);
    return &r->last;
  };
}

}  // namespace k3::train
