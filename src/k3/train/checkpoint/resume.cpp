#include "k3/train/checkpoint/resume.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"
#include "k3/train/checkpoint/sharded.h"
#include "k3/train/session.h"

namespace k3::train {
namespace {

using nlohmann::json;

constexpr const char* kDataKey = "data";  // --allow-change data: the data's tokens changed

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

int64_t manifest_count(const json& manifest, const char* key, const std::string& origin) {
  auto it = manifest.find(key);
  K3_CHECK_CTX(it != manifest.end(), (ErrorContext{origin, key, -1}), "missing from the manifest");
  K3_CHECK_CTX(it->is_number_integer() && it->get<int64_t>() >= 0, (ErrorContext{origin, key, -1}),
               "expected an integer >= 0, found ", it->dump());
  return it->get<int64_t>();
}

// Refuses the changes not allowed, all of them in one message.
void refuse_unallowed(const std::vector<FieldChange>& changes,
                      const std::vector<std::string>& allowed, const std::string& run_dir) {
  std::string refused, flags;
  for (const FieldChange& c : changes) {
    if (!contains(resume_guarded_keys(), c.key) || contains(allowed, c.key)) continue;
    refused += (refused.empty() ? "" : "; ") + c.key + " " + c.from + " -> " + c.to;
    flags += " --allow-change " + c.key;
  }
  K3_CHECK_CTX(refused.empty(), (ErrorContext{run_dir, "", -1}), "resuming would change the run (",
               refused,
               "); the checkpoint's configuration is used unless the change is stated:", flags);
}

}  // namespace

const std::vector<std::string>& resume_guarded_keys() {
  static const std::vector<std::string> keys = {
      "model.config",        "model.seed",        "data.source",  "data.path", "data.tokenizer",
      "data.builtin_tokens", "data.val_fraction", "data.seq_len", "data.seed", "train.batch_size",
      "train.grad_accum",    "curriculum",        kDataKey};
  return keys;
}

TrainingState training_state(const json& manifest, const std::string& dir) {
  const std::string origin = dir + "/manifest.json";
  TrainingState st;
  st.step = manifest_count(manifest, "step", origin);
  st.optimizer_steps = manifest_count(manifest, "optimizer_steps", origin);
  st.skipped_steps = manifest_count(manifest, "skipped_steps", origin);
  auto cursor = manifest.find("data_cursor");
  K3_CHECK_CTX(cursor != manifest.end() && cursor->is_string(),
               (ErrorContext{origin, "data_cursor", -1}),
               cursor == manifest.end() ? "missing from the manifest" : "expected a string");
  try {
    st.cursor = data::DataCursor::parse(cursor->get<std::string>());
  } catch (const Error& e) {
    throw Error(e.message(), ErrorContext{origin, "data_cursor", -1});
  }
  auto data = manifest.find("data");
  K3_CHECK_CTX(data != manifest.end() && data->is_object() && data->contains("sha256"),
               (ErrorContext{origin, "data", -1}),
               "expected the data's fingerprint {\"sha256\", \"train_tokens\", ...}");
  st.data = *data;
  // Written by runs with a curriculum only: the phase the cursor and the data belong to.
  if (auto phase = manifest.find("phase"); phase != manifest.end()) {
    K3_CHECK_CTX(phase->is_number_integer() && phase->get<int64_t>() >= 0,
                 (ErrorContext{origin, "phase", -1}), "expected a phase index >= 0");
    st.phase = phase->get<int>();
  }
  return st;
}

ResumePoint plan_resume(const std::string& run_dir, const std::string& config_path,
                        const std::vector<std::string>& overrides,
                        const std::vector<std::string>& allowed) {
  for (const std::string& key : allowed) {
    if (contains(resume_guarded_keys(), key)) continue;
    std::string keys;
    for (const std::string& k : resume_guarded_keys()) keys += " " + k;
    throw Error("expected one of" + keys, ErrorContext{"", "--allow-change " + key, -1});
  }
  ResumePoint p;
  CheckpointConfigs recorded;
  p.found = load_newest_valid(run_dir, CheckpointParts::everything,
                              [&](const Checkpoint& ck, const std::string& dir) {
                                p.state = training_state(ck.manifest, dir);
                                recorded = checkpoint_configs(ck, dir);
                              });
  p.config = load_run_config(config_path, overrides, &recorded.run);
  p.config.run.dir = run_dir;  // where the run is now, wherever it started
  p.model = recorded.model;
  for (FieldChange& c : changed_fields(recorded.run, p.config)) {
    if (c.key == "run.dir") continue;
    if (c.key == "model.config") {
      // Another path to the same model is no change of model: compare the contents.
      model::ModelConfig asked = model::load_model_config(p.config.model.config);
      if (model::model_config_to_json(asked) == model::model_config_to_json(recorded.model))
        continue;
      p.model = asked;
    }
    p.changes.push_back(std::move(c));
  }
  refuse_unallowed(p.changes, allowed, run_dir);
  p.allowed_changes = allowed;
  return p;
}

std::vector<FieldChange> check_data_unchanged(const json& recorded, const json& now,
                                              const std::vector<std::string>& allowed,
                                              const std::string& run_dir) {
  auto same = [&](const char* key) {
    return recorded.value(key, json()) == now.value(key, json());
  };
  if (same("sha256") && same("train_tokens") && same("validation_tokens")) return {};
  auto describe = [](const json& d) {
    return d.value("source", std::string("?")) + " (" +
           std::to_string(d.value("train_tokens", int64_t{-1})) + " + " +
           std::to_string(d.value("validation_tokens", int64_t{-1})) + " tokens, sha256 " +
           d.value("sha256", std::string("?")).substr(0, 12) + ")";
  };
  std::vector<FieldChange> change = {{kDataKey, describe(recorded), describe(now)}};
  K3_CHECK_CTX(contains(allowed, kDataKey), (ErrorContext{run_dir, "", -1}),
               "the data changed since the run started: ", change[0].from, " then, ", change[0].to,
               " now; pass --allow-change data to resume on it anyway");
  return change;
}

}  // namespace k3::train
