// Checkpoints: one directory per step under RUN_DIR/checkpoints/, holding model.safetensors
// (weights by K3 name, global coordinates), optimizer.safetensors, the caller's small text files
// (the resolved model config.json and run config, so a checkpoint stands alone) and
// manifest.json. The manifest carries the caller's state (data cursor, RNG, layout, ...) plus the
// step, the format version and the size and SHA-256 of every other file, so a load detects
// truncation and corruption before decoding.
//
// Crash safety: files are written atomically into a hidden temporary directory that is renamed to
// step_NNNNNNNN only when complete (so the newest step directory is always a finished save); only
// then are checkpoints beyond keep_last removed. One process (rank 0)
// writes a run's checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "k3/tensor/tensor.h"

namespace k3::train {

inline constexpr int kCheckpointFormatVersion = 2;

struct Checkpoint {
  std::vector<std::pair<std::string, Tensor>> model;      // K3 names, global shapes
  std::vector<std::pair<std::string, Tensor>> optimizer;  // optimizer state by name
  std::map<std::string, std::string> texts;            // file name -> contents (config.json, ...)
  nlohmann::json manifest = nlohmann::json::object();  // a JSON object
};

// What a load reads: evaluation and sampling need neither the optimizer state nor its file.
enum class CheckpointParts { everything, model_only };

// "step_00000123"
std::string checkpoint_dir_name(int64_t step);

// Writes RUN_DIR/checkpoints/step_NNNNNNNN (replacing one of the same step) and keeps the
// keep_last most recent checkpoints (0 keeps all). Returns the step directory.
// The written manifest is the caller's plus "step", "format_version" and "files".
std::string save_checkpoint(const std::string& run_dir, int64_t step, const Checkpoint& ck,
                            int keep_last = 2);

// Loads a step directory, verifying every file it reads against the manifest; the returned
// manifest is the one on disk, its "step" checked against the directory's name. Throws a
// k3::Error naming the file (and field) and the problem.
Checkpoint load_checkpoint(const std::string& step_dir,
                           CheckpointParts parts = CheckpointParts::everything);

// Removes what interrupted saves left in RUN_DIR/checkpoints (hidden temporary directories);
// returns how many. Only the process that owns the run directory may call it.
int remove_unfinished_saves(const std::string& run_dir);

// Moves an unusable step directory out of the way (to checkpoints/unusable.step_NNNNNNNN,
// replacing an older one of that name) so it is neither loaded nor counted by keep_last, yet kept
// for inspection; returns the new path. Only the process that owns the run directory may call it.
std::string set_aside_checkpoint(const std::string& step_dir);

// A step directory passed over because it could not be used, and why.
struct SkippedCheckpoint {
  std::string dir, why;
  std::string describe() const { return dir + ": " + why; }
};

// A checkpoint and where it came from.
struct FoundCheckpoint {
  std::string dir;  // the step directory loaded
  Checkpoint checkpoint;
  std::vector<SkippedCheckpoint> skipped;  // newer step directories that failed
};

// Loads a step directory as given (its errors propagate), or for a run directory the newest step
// directory that loads and passes CHECK (which throws a k3::Error for a checkpoint unfit for the
// caller), skipping the corrupt ones. Throws, listing what was skipped, when none is left.
FoundCheckpoint load_newest_valid(
    const std::string& run_dir_or_step_dir, CheckpointParts parts,
    const std::function<void(const Checkpoint&, const std::string& dir)>& check = nullptr);

// The step directories of a run, newest (highest step) first. Unfinished writes are not listed.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

}  // namespace k3::train
