// Resuming a run: which checkpoint to continue from, with which configuration, and which
// changes to the run the user must state explicitly.
//
// A checkpoint carries its model config and run config, so a resume reads neither the files the
// run was started from nor anything else but the run directory: `k3lab train --resume RUN_DIR`.
// The user may still ask for changes (--config FILE, --set key=value). Those that make it another
// run: the model, its seed, the data and how it is cut (source, size, split, sequence length),
// the batch (batch_size, grad_accum), the curriculum; and data whose tokens changed since the
// run started. Each is refused unless named with --allow-change (KEY, or "data" for changed
// tokens). Every change made is recorded in RUN_DIR/history.jsonl.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "k3/data/data_cursor.h"
#include "k3/model/config.h"
#include "k3/train/checkpoint/checkpoint.h"
#include "k3/train/config/run_config.h"

namespace k3::train {

// What a checkpoint's manifest holds for training to go on, each field checked.
struct TrainingState {
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  int64_t skipped_steps = 0;
  data::DataCursor cursor;
  nlohmann::json data;  // data_fingerprint() of the data the run (or its phase) started with
  int phase = -1;       // under a curriculum, the phase of the cursor and the data; else -1
};
TrainingState training_state(const nlohmann::json& manifest, const std::string& dir);

struct ResumePoint {
  FoundCheckpoint found;  // the step directory, its contents, the newer ones skipped
  TrainingState state;
  RunConfig config;          // to continue with: the checkpoint's, with the changes asked for
  model::ModelConfig model;  // the checkpoint's, or the one asked for when allowed
  std::vector<FieldChange> changes;          // from the checkpoint's configuration
  std::vector<std::string> allowed_changes;  // as asked, for the data check once it is loaded
  std::vector<std::string> set_aside;        // where the skipped checkpoints were moved
};

// The keys --allow-change accepts.
const std::vector<std::string>& resume_guarded_keys();

// The newest usable checkpoint of RUN_DIR and the configuration to continue it with: the
// checkpoint's, or CONFIG_PATH's when given, then OVERRIDES. Throws when a guarded key changes
// without being in ALLOWED.
ResumePoint plan_resume(const std::string& run_dir, const std::string& config_path,
                        const std::vector<std::string>& overrides,
                        const std::vector<std::string>& allowed);

// Throws unless the data's fingerprint NOW equals the one the run started with, or "data" is
// ALLOWED. Returns the change to record (empty when none).
std::vector<FieldChange> check_data_unchanged(const nlohmann::json& recorded,
                                              const nlohmann::json& now,
                                              const std::vector<std::string>& allowed,
                                              const std::string& run_dir);

}  // namespace k3::train
