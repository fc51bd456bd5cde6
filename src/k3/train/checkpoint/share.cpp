#include "k3/train/checkpoint/share.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::train {
namespace fs = std::filesystem;

namespace {

// Collectives move 64-bit words: bytes go as whole words, the last one padded.
constexpr int64_t kChunkWords = int64_t{8} << 20;  // 64 MiB a broadcast

// TEXT from the root to every rank of COMM (the root's argument counts).
std::string broadcast_text(const dist::Comm& comm, std::string text) {
  int64_t size = static_cast<int64_t>(text.size());
  comm.broadcast(&size, 1, 0);
  std::vector<int64_t> words((size + 7) / 8, 0);
  if (comm.rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  comm.broadcast(words.data(), static_cast<int64_t>(words.size()), 0);
  text.resize(size);
  std::memcpy(text.data(), words.data(), text.size());
  return text;
}

std::string read_or_empty(const fs::path& path) {
  return file_exists(path.string()) ? read_file(path.string()) : std::string();
}

// The root's file FROM, written to TO by the other ranks of COMM, in chunks.
void send_file(const dist::Comm& comm, const fs::path& from, const fs::path& to) {
  const bool root = comm.rank() == 0;
  std::ifstream in;
  std::ofstream out;
  int64_t size = 0;
  if (root) {
    in.open(from, std::ios::binary);
    K3_CHECK_CTX(in.good(), (ErrorContext{from.string(), "", -1}), "cannot read it to send");
    size = static_cast<int64_t>(fs::file_size(from));
  } else {
    out.open(to, std::ios::binary);
    K3_CHECK_CTX(out.good(), (ErrorContext{to.string(), "", -1}), "cannot write the lead's copy");
  }
  comm.broadcast(&size, 1, 0);
  std::vector<int64_t> words(std::min(kChunkWords, (size + 7) / 8));
  for (int64_t done = 0; done < size;) {
    const int64_t bytes = std::min(size - done, kChunkWords * 8);
    if (root) in.read(reinterpret_cast<char*>(words.data()), bytes);
    comm.broadcast(words.data(), (bytes + 7) / 8, 0);
    if (!root) out.write(reinterpret_cast<const char*>(words.data()), bytes);
    done += bytes;
  }
  if (!root) {
    out.close();
    K3_CHECK_CTX(out.good(), (ErrorContext{to.string(), "", -1}), "writing the lead's copy failed");
  }
}

constexpr const char* kCopyPrefix = "k3lab-checkpoint.";  // then the pid and the world rank

// The copies that processes no longer running left in the temporary directory (a job that ended
// while it resumed, before its ranks deleted them).
void remove_stale_copies() {
  std::error_code ignored;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::temp_directory_path(), ignored)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(kCopyPrefix)) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + std::strlen(kCopyPrefix)));
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ignored);
  }
}

}  // namespace

CheckpointView::CheckpointView(std::string run_dir, std::string lead_step_dir, bool copy)
    : run_dir_(std::move(run_dir)), lead_step_dir_(std::move(lead_step_dir)), copy_(copy) {}

CheckpointView::~CheckpointView() {
  std::error_code ignored;
  if (copy_) fs::remove_all(run_dir_, ignored);
}

CheckpointView share_checkpoint(const dist::Comm& world, const std::string& run_dir,
                                const std::string& lead_step_dir) {
  const bool lead = world.rank() == 0;
  if (world.size() == 1) return {run_dir, lead_step_dir, false};
  const std::string step_dir = broadcast_text(world, lead ? lead_step_dir : "");
  const fs::path manifest = fs::path(step_dir) / "manifest.json";
  const std::string lead_manifest = broadcast_text(world, lead ? read_or_empty(manifest) : "");
  const bool sees = lead || read_or_empty(manifest) == lead_manifest;
  int64_t missing = sees ? 0 : 1;
  world.all_reduce(&missing, 1);
  if (missing == 0) return {run_dir, step_dir, false};
  // The lead and the ranks that cannot see its files, the lead first.
  const dist::Comm copies = world.split("checkpoint_copy", sees && !lead ? 1 : 0, world.rank());
  if (sees && !lead) return {run_dir, step_dir, false};
  std::string names;  // the step directory's files, one a line
  if (lead)
    for (const fs::directory_entry& e : fs::directory_iterator(step_dir))
      if (e.is_regular_file()) names += e.path().filename().string() + "\n";
  names = broadcast_text(copies, names);
  fs::path copy;
  if (!lead) {
    remove_stale_copies();
    copy = fs::temp_directory_path() /
           (std::string(kCopyPrefix) + std::to_string(getpid()) + "." + std::to_string(world.rank()));
    fs::remove_all(copy);
    fs::create_directories(copy / "checkpoints" / fs::path(step_dir).filename());
  }
  // Removed if a file fails to arrive; a job aborted meanwhile leaves it to remove_stale_copies.
  struct Guard {
    fs::path path;
    ~Guard() {
      std::error_code ignored;
      if (!path.empty()) fs::remove_all(path, ignored);
    }
  } guard{copy};
  const fs::path copy_step = copy / "checkpoints" / fs::path(step_dir).filename();
  for (size_t at = 0, end; (end = names.find('\n', at)) != std::string::npos; at = end + 1) {
    const std::string name = names.substr(at, end - at);
    send_file(copies, fs::path(step_dir) / name, copy_step / name);
  }
  guard.path.clear();
  if (lead) return {run_dir, step_dir, false};
  return {copy.string(), step_dir, true};
}

}  // namespace k3::train
