#include "k3/train/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/format.h"
#include "k3/base/fs.h"
#include "k3/tensor/safetensors.h"

namespace k3::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kCheckpointsDir = "checkpoints";
constexpr std::string_view kStepPrefix = "step_";
// Directories being written (or left behind by a crash) start with this; they are never loaded.
constexpr std::string_view kTempPrefix = ".tmp.";
constexpr std::string_view kUnusablePrefix = "unusable.";
constexpr uint64_t kVerifyChunk = uint64_t{4} << 20;  // bytes read at a time to check a file

std::optional<int64_t> step_of(const std::string& dir_name) {
  if (!dir_name.starts_with(kStepPrefix)) return std::nullopt;
  std::string_view digits = std::string_view(dir_name).substr(kStepPrefix.size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int64_t step = 0;
  if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec != std::errc())
    return std::nullopt;  // too many digits
  return step;
}

// Makes renames and removals inside DIR durable.
void sync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_recorded(const fs::path& dir, const char* name, const std::string& bytes, json& files) {
  write_file_atomic((dir / name).string(), bytes);
  files[name] = {{"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
}

// The first error of a save's filesystem work, held while the fills after it still run: on the
// other ranks the same fills run collectives, which must all be matched.
class FirstError {
 public:
  template <typename F>
  void attempt(F&& f) {
    if (error_) return;
    try {
      f();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
};

std::vector<SafetensorsEntry> entries_of(const std::vector<TensorSource>& sources) {
  std::vector<SafetensorsEntry> entries;
  for (const TensorSource& s : sources) entries.push_back({s.name, DType::F32, s.shape, 0, 0});
  return entries;
}

// Runs each source's fill into BUFFER, in order; with a directory (the writer's), streams the
// values into DIR/NAME and records the file's size and SHA-256 in FILES.
void save_tensors(const std::optional<fs::path>& dir, const char* name,
                  const std::vector<TensorSource>& sources, std::vector<float>& buffer, json& files,
                  FirstError& error) {
  std::optional<SafetensorsWriter> out;
  if (dir) error.attempt([&] { out.emplace((*dir / name).string(), entries_of(sources)); });
  for (const TensorSource& s : sources) {
    s.fill(buffer.data());
    if (out)
      error.attempt([&] {
        out->write(buffer.data(), static_cast<size_t>(shape_numel(s.shape)) * sizeof(float));
      });
  }
  if (out)
    error.attempt([&] {
      const SafetensorsWriter::Written written = out->finish();
      files[name] = {{"bytes", written.bytes}, {"sha256", written.sha256}};
    });
}

// What every rank checks before any fill runs, so that a bad argument fails them all alike.
void check_contents(int64_t step, const CheckpointContents& ck) {
  K3_CHECK(step >= 0, "checkpoint step must be >= 0, got ", step);
  K3_CHECK(ck.manifest.is_object(), "checkpoint manifest must be a JSON object, got ",
           ck.manifest.type_name());
  for (const auto& [file, text] : ck.texts)
    K3_CHECK(file != kManifestFile && file != kModelFile && file != kOptimizerFile &&
                 file.find('/') == std::string::npos,
             "checkpoint text file '", file, "' clashes with the checkpoint's own files");
  for (const auto* sources : {&ck.model, &ck.optimizer}) {
    std::vector<SafetensorsEntry> entries = entries_of(*sources);
    encode_safetensors_header(entries, {});  // refuses names used twice
  }
}

// Puts the finished directory FROM at TO. A directory cannot be renamed over a non-empty one, so
// an existing TO is first moved aside under a temporary name.
void move_into_place(const fs::path& from, const fs::path& to) {
  fs::path old;
  if (fs::exists(to)) {
    old = to.parent_path() / (std::string(kTempPrefix) + to.filename().string() + ".old." +
                              std::to_string(::getpid()));
    fs::remove_all(old);
    fs::rename(to, old);
  }
  fs::rename(from, to);
  sync_directory(to.parent_path());
  if (!old.empty()) fs::remove_all(old);
}

// Keeps the checkpoint just written plus the keep_last - 1 newest others; removes what
// interrupted writes left behind.
void prune(const fs::path& root, const std::string& just_written, int keep_last) {
  remove_unfinished_saves(root.parent_path().string());
  if (keep_last <= 0) return;
  int kept = 1;
  for (const std::string& dir : list_checkpoints(root.parent_path().string())) {
    if (fs::path(dir).filename() == just_written) continue;
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    fs::remove_all(dir);
  }
  sync_directory(root);
}

const json& manifest_field(const json& manifest, const std::string& key, const std::string& path) {
  auto it = manifest.find(key);
  K3_CHECK_CTX(it != manifest.end(), (ErrorContext{path, key, -1}), "missing from the manifest");
  return *it;
}

// Opens DIR/NAME and checks it against its manifest entry: the size, then the SHA-256 of the
// contents, read in chunks of kVerifyChunk bytes.
FileReader open_verified(const fs::path& dir, const std::string& name, const json& files,
                         const std::string& manifest_path) {
  const std::string path = (dir / name).string();
  const ErrorContext ctx{path, "", -1};
  const json& entry = manifest_field(files, name, manifest_path);
  K3_CHECK_CTX(entry.is_object() && entry.contains("bytes") &&
                   entry["bytes"].is_number_unsigned() && entry.contains("sha256") &&
                   entry["sha256"].is_string(),
               (ErrorContext{manifest_path, "files." + name, -1}),
               "expected {\"bytes\": <size>, \"sha256\": <hex>}, found ", entry.dump());
  K3_CHECK_CTX(file_exists(path), ctx, "missing: the checkpoint is incomplete");
  FileReader file(path);
  const uint64_t expected_size = entry["bytes"].get<uint64_t>();
  K3_CHECK_CTX(file.size() == expected_size, ctx, "size mismatch (expected ", expected_size,
               " bytes, found ", file.size(), "): the file is truncated or corrupt");
  Sha256 hash;
  std::string chunk(std::min<uint64_t>(kVerifyChunk, file.size()), '\0');
  for (uint64_t at = 0; at < file.size(); at += chunk.size()) {
    chunk.resize(std::min<uint64_t>(chunk.size(), file.size() - at));
    file.read(at, chunk.data(), chunk.size());
    hash.update(chunk);
  }
  const std::string expected_sum = entry["sha256"].get<std::string>(),
                    found_sum = hash.hex_digest();
  K3_CHECK_CTX(found_sum == expected_sum, ctx, "checksum mismatch (expected sha256 ", expected_sum,
               ", found ", found_sum, "): the checkpoint is corrupt");
  return file;
}

std::string read_verified(const fs::path& dir, const std::string& name, const json& files,
                          const std::string& manifest_path) {
  const FileReader file = open_verified(dir, name, files, manifest_path);
  std::string bytes(file.size(), '\0');
  file.read(0, bytes.data(), bytes.size());
  return bytes;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  return strprintf("step_%08lld", static_cast<long long>(step));
}

std::vector<TensorSource> tensor_sources(std::vector<std::pair<std::string, Tensor>> tensors) {
  std::vector<TensorSource> sources;
  for (auto& [name, t] : tensors) {
    K3_CHECK_CTX(t.dtype() == DType::F32, (ErrorContext{"", name, -1}),
                 "checkpoints hold F32 tensors, found ", dtype_name(t.dtype()));
    sources.push_back({name, t.shape(), [t](float* out) {
                         if (t.nbytes()) std::memcpy(out, t.data(), t.nbytes());
                       }});
  }
  return sources;
}

std::string save_checkpoint(const std::string& run_dir, int64_t step, const CheckpointContents& ck,
                            int keep_last, bool writer) {
  check_contents(step, ck);
  const fs::path root = fs::path(run_dir) / kCheckpointsDir;
  const std::string name = checkpoint_dir_name(step);
  const fs::path final_dir = root / name;
  int64_t largest = 0;
  for (const auto* sources : {&ck.model, &ck.optimizer})
    for (const TensorSource& s : *sources) largest = std::max(largest, shape_numel(s.shape));
  std::vector<float> buffer(static_cast<size_t>(largest));

  FirstError error;
  std::optional<fs::path> tmp;  // the writer's directory being filled
  if (writer)
    error.attempt([&] {
      const fs::path dir =
          root / (std::string(kTempPrefix) + name + "." + std::to_string(::getpid()));
      fs::create_directories(root);
      fs::remove_all(dir);
      fs::create_directory(dir);
      tmp = dir;
    });
  json files = json::object();
  save_tensors(tmp, kModelFile, ck.model, buffer, files, error);
  save_tensors(tmp, kOptimizerFile, ck.optimizer, buffer, files, error);
  if (!writer) return final_dir.string();
  try {
    error.rethrow();
    for (const auto& [file, text] : ck.texts) write_recorded(*tmp, file.c_str(), text, files);
    json manifest = ck.manifest;
    manifest["step"] = step;
    manifest["format_version"] = kCheckpointFormatVersion;
    manifest["files"] = files;
    // Written last and atomically, which also syncs the directory's entries of the tensor files.
    write_file_atomic((*tmp / kManifestFile).string(), manifest.dump(2) + "\n");

    move_into_place(*tmp, final_dir);
    prune(root, name, keep_last);
  } catch (const fs::filesystem_error& e) {
    throw Error(std::string("cannot write checkpoint: ") + e.code().message(),
                ErrorContext{e.path1().empty() ? final_dir.string() : e.path1().string(), "", -1});
  }
  return final_dir.string();
}

Checkpoint load_checkpoint(const std::string& step_dir, CheckpointParts parts) {
  const fs::path dir(step_dir);
  const std::string manifest_path = (dir / kManifestFile).string();
  const ErrorContext ctx{manifest_path, "", -1};
  K3_CHECK_CTX(file_exists(manifest_path), ctx, "missing: not a complete checkpoint directory");
  Checkpoint ck;
  try {
    ck.manifest = json::parse(read_file(manifest_path));
  } catch (const json::exception& e) {
    throw Error(std::string("malformed JSON (") + e.what() + "): the checkpoint is corrupt", ctx);
  }
  K3_CHECK_CTX(ck.manifest.is_object(), ctx, "expected a JSON object, found ",
               ck.manifest.type_name());
  const json& version = manifest_field(ck.manifest, "format_version", manifest_path);
  K3_CHECK_CTX(version.is_number_integer() && version.get<int>() == kCheckpointFormatVersion,
               (ErrorContext{manifest_path, "format_version", -1}), "expected ",
               kCheckpointFormatVersion, ", found ", version.dump(),
               ": written by another version of k3lab");
  const json& step = manifest_field(ck.manifest, "step", manifest_path);
  const std::optional<int64_t> named_step = step_of(dir.filename().string());
  K3_CHECK_CTX(step.is_number_integer() && step.get<int64_t>() >= 0 &&
                   (!named_step || step.get<int64_t>() == *named_step),
               (ErrorContext{manifest_path, "step", -1}), "expected ",
               named_step ? std::to_string(*named_step) + " (the directory's step)"
                          : std::string("an integer >= 0"),
               ", found ", step.dump());
  const json& files = manifest_field(ck.manifest, "files", manifest_path);
  K3_CHECK_CTX(files.is_object(), (ErrorContext{manifest_path, "files", -1}), "expected an object");
  for (const auto& [file, entry] : files.items())
    if (file != kModelFile && file != kOptimizerFile)
      ck.texts[file] = read_verified(dir, file, files, manifest_path);
  ck.model = TensorFile(open_verified(dir, kModelFile, files, manifest_path));
  if (parts == CheckpointParts::everything)
    ck.optimizer = TensorFile(open_verified(dir, kOptimizerFile, files, manifest_path));
  return ck;
}

int remove_unfinished_saves(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / kCheckpointsDir;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().starts_with(kTempPrefix)) {
      fs::remove_all(entry.path());
      ++removed;
    }
  return removed;
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / kCheckpointsDir;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return {};
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    auto step = step_of(entry.path().filename().string());
    if (step && entry.is_directory()) found.emplace_back(*step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(dir);
  return dirs;
}

std::string set_aside_checkpoint(const std::string& step_dir) {
  const fs::path from(step_dir);
  const fs::path to =
      from.parent_path() / (std::string(kUnusablePrefix) + from.filename().string());
  try {
    fs::remove_all(to);
    fs::rename(from, to);
    sync_directory(to.parent_path());
  } catch (const fs::filesystem_error& e) {
    throw Error(std::string("cannot set the checkpoint aside: ") + e.code().message(),
                ErrorContext{step_dir, "", -1});
  }
  return to.string();
}

FoundCheckpoint load_newest_valid(
    const std::string& run_dir_or_step_dir, CheckpointParts parts,
    const std::function<void(const Checkpoint&, const std::string& dir)>& check) {
  fs::path path = fs::path(run_dir_or_step_dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // a trailing slash
  const ErrorContext ctx{run_dir_or_step_dir, "", -1};
  K3_CHECK_CTX(fs::is_directory(path), ctx,
               "not a directory: expected a run directory or a checkpoint step directory");
  auto load = [&](const std::string& dir) {
    FoundCheckpoint found{dir, load_checkpoint(dir, parts), {}};
    if (check) check(found.checkpoint, dir);
    return found;
  };
  if (step_of(path.filename().string()) || file_exists((path / kManifestFile).string()))
    return load(path.string());

  std::vector<SkippedCheckpoint> skipped;
  for (const std::string& dir : list_checkpoints(path.string())) {
    try {
      FoundCheckpoint found = load(dir);
      found.skipped = std::move(skipped);
      return found;
    } catch (const Error& e) {
      skipped.push_back({dir, e.what()});
    }
  }
  std::string why =
      skipped.empty() ? std::string(" (no ") + kCheckpointsDir + "/step_* directory)"
                      : " (" + std::to_string(skipped.size()) +
                            " skipped as unusable; the newest: " + skipped.front().describe() + ")";
  throw Error("no usable checkpoint" + why, ctx);
}

}  // namespace k3::train
