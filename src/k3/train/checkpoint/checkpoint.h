// Checkpoints: one directory per step under RUN_DIR/checkpoints/, holding model.safetensors
// (weights by K3 name, global coordinates), optimizer.safetensors, the caller's small text files
// (the resolved model config.json and run config, so a checkpoint stands alone) and
// manifest.json. The manifest carries the caller's state (data cursor, RNG, layout, ...) plus the
// step, the format version and the size and SHA-256 of every other file, so a load detects
// truncation and corruption before any tensor is handed out.
//
// Memory: neither a save nor a load holds a whole file. A save asks each tensor's source for its
// values when it reaches it, into one buffer sized for the largest tensor, and streams them to the
// file; a load verifies each file in chunks of a few MiB, parses its header and reads a tensor
// only when asked for, into the caller's memory.
//
// Crash safety: files are written into a hidden temporary directory (each one synced) that is
// renamed to step_NNNNNNNN only when complete (so the newest step directory is always a finished
// save); only then are checkpoints beyond keep_last removed. One process (rank 0) writes a run's
// checkpoints; every rank runs the sources, which may be collectives.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "k3/tensor/safetensors.h"
#include "k3/tensor/tensor.h"

namespace k3::train {

inline constexpr int kCheckpointFormatVersion = 2;

// A tensor to save, produced when the save reaches it: FILL writes the global tensor's
// numel(shape) f32 values into a buffer the save provides. A fill may run collectives.
struct TensorSource {
  std::string name;
  Shape shape;
  std::function<void(float* out)> fill;
};
// Sources that copy tensors already in memory (f32, each kept alive by its source).
std::vector<TensorSource> tensor_sources(std::vector<std::pair<std::string, Tensor>> tensors);

// What a save writes.
struct CheckpointContents {
  std::vector<TensorSource> model;                     // K3 names, global shapes
  std::vector<TensorSource> optimizer;                 // optimizer state by name
  std::map<std::string, std::string> texts;            // file name -> contents (config.json, ...)
  nlohmann::json manifest = nlohmann::json::object();  // a JSON object
};

// A loaded checkpoint: every file it read is verified; the tensors stay in their files, open, and
// are read by name (TensorFile) when wanted.
struct Checkpoint {
  TensorFile model;      // K3 names, global shapes
  TensorFile optimizer;  // optimizer state by name; no entries when not loaded
  std::map<std::string, std::string> texts;
  nlohmann::json manifest = nlohmann::json::object();
};

// What a load reads: evaluation and sampling need neither the optimizer state nor its file.
enum class CheckpointParts { everything, model_only };

// "step_00000123"
std::string checkpoint_dir_name(int64_t step);

// Writes RUN_DIR/checkpoints/step_NNNNNNNN (replacing one of the same step) and keeps the
// keep_last most recent checkpoints (0 keeps all). Returns the step directory.
// The written manifest is the caller's plus "step", "format_version" and "files".
// Every rank of a job calls it, the same sources in the same order; each source's fill runs
// exactly once, the model's in order then the optimizer's, on every rank. Only the WRITER touches
// the filesystem; should that fail, its remaining fills still run (so that collectives in them
// stay matched) before the error is thrown. Extra memory: the largest tensor, once.
std::string save_checkpoint(const std::string& run_dir, int64_t step, const CheckpointContents& ck,
                            int keep_last = 2, bool writer = true);

// Loads a step directory, verifying every file it reads against the manifest (size and SHA-256,
// read in chunks) before it returns; the returned manifest is the one on disk, its "step" checked
// against the directory's name. Tensor headers are checked, tensor data is not read. Throws a
// k3::Error naming the file (and field) and the problem. model_only never opens the optimizer
// file.
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
