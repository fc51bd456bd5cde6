// Checkpoints: one directory per step under RUN_DIR/checkpoints/, holding model.safetensors
// (weights by K3 name, global coordinates), optimizer.safetensors and manifest.json. The manifest
// carries the caller's state (data cursor, RNG, layout, ...) plus the step, the format version and
// the size and SHA-256 of each file, so a load detects truncation and corruption before decoding.
//
// Crash safety: files are written atomically into a hidden temporary directory that is renamed to
// step_NNNNNNNN only when complete; then checkpoints/latest (the name of that directory) is
// replaced atomically; only then are checkpoints beyond keep_last removed. One process (rank 0)
// writes a run's checkpoints.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3::train {

inline constexpr int kCheckpointFormatVersion = 1;

struct Checkpoint {
  std::vector<std::pair<std::string, Tensor>> model;      // K3 names, global shapes
  std::vector<std::pair<std::string, Tensor>> optimizer;  // optimizer state by name
  nlohmann::json manifest = nlohmann::json::object();     // a JSON object
};

// "step_00000123"
std::string checkpoint_dir_name(int64_t step);

// Writes RUN_DIR/checkpoints/step_NNNNNNNN (replacing one of the same step), points `latest` at
// it and keeps the keep_last most recent checkpoints (0 keeps all). Returns the step directory.
// The written manifest is the caller's plus "step", "format_version" and "files".
std::string save_checkpoint(const std::string& run_dir, int64_t step, const Checkpoint& ck,
                            int keep_last = 2);

// Loads a step directory, verifying every file against the manifest; the returned manifest is
// the one on disk. Throws a k3::Error naming the file and the problem.
Checkpoint load_checkpoint(const std::string& step_dir);

// The step directory to resume from: a step directory as given, or for a run directory the one
// named by checkpoints/latest, or the newest step directory when `latest` is missing or stale.
// Throws when there is none.
std::string find_checkpoint(const std::string& run_dir_or_step_dir);

// The step directories of a run, newest (highest step) first. Unfinished writes are not listed.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

}  // namespace k3::train
