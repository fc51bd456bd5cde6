// The messages between k3lab and the agent inside a sandbox (src/k3/sandbox_agent): one request,
// one reply, each a length-prefixed frame of fields. Shared by both sides, so it uses nothing of
// k3lab but the C++ library (the agent is a small static binary).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3::sandbox::wire {

// A broken or malformed frame, or a peer that went away.
struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Frames are at most this large (a file transfer or a command's capped output fits).
constexpr uint32_t kMaxFrame = 256u << 20;

// Fields appended in order; the reader takes them in the same order.
class Writer {
 public:
  void u64(uint64_t v);
  void str(const std::string& s);
  void strs(const std::vector<std::string>& v);
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string bytes) : in_(std::move(bytes)) {}
  uint64_t u64();
  std::string str();
  std::vector<std::string> strs();

 private:
  void need(size_t n) const;
  std::string in_;
  size_t at_ = 0;
};

// Whole frames on a file descriptor (blocking; EINTR retried). read_frame throws WireError at end
// of file. deadline_ms < 0: no deadline; otherwise a reply that does not arrive in time throws.
void write_frame(int fd, const std::string& payload);
// Raw bytes of a frame that is written in parts (its length first); throws WireError.
void write_bytes(int fd, std::string_view bytes);
std::string read_frame(int fd, int64_t deadline_ms = -1);

enum class Op : uint64_t { kPing = 1, kExec = 2, kPut = 3, kGet = 4, kReset = 5, kLayer = 6 };

// kReset: a nonce (echoed back as the reply's payload), then the paths of the root, relative to
// it, to remove (agent/reset.h).

// kLayer: no fields; the reply's payload is the writable layer, encoded TreeEntry's (below), in
// one frame as get's file is.

// One entry of a directory tree sent over the channel (a microVM's writable layer), in the form
// overlayfs keeps it: a deletion is a whiteout (a character device 0:0), a directory that hides
// what lower layers hold there is opaque. Parents come before their children.
struct TreeEntry {
  std::string path;     // relative, '/'-separated, no "." or ".." components
  uint64_t mode = 0;    // st_mode: type and permission bits
  std::string data;     // a regular file's bytes, or a symlink's target
  bool opaque = false;  // a directory marked opaque (trusted.overlay.opaque=y)
};
std::string encode(const std::vector<TreeEntry>& tree);
std::vector<TreeEntry> decode_tree(const std::string& bytes);

// Resource limits of one command, applied by the agent as rlimits (0: not set).
struct Rlimits {
  uint64_t address_space_bytes = 0;
  uint64_t processes = 0;
  uint64_t cpu_seconds = 0;
  uint64_t file_size_bytes = 0;
  uint64_t open_files = 0;
};

struct ExecRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=VALUE; empty: a small default (PATH, HOME, LANG)
  std::string cwd = "/";
  std::string stdin_data;
  uint64_t timeout_ms = 0;        // 0: the sandbox's limit
  uint64_t output_cap_bytes = 0;  // per stream; 0: the sandbox's limit
  Rlimits rlimits;
};

struct ExecResult {
  int64_t exit_code = -1;  // -1 when killed by a signal
  int64_t signal = 0;      // the signal that ended it, or 0
  bool timed_out = false;
  std::string stdout_data, stderr_data;
  bool stdout_truncated = false, stderr_truncated = false;
  uint64_t wall_ms = 0;
  std::string error;  // the agent could not start the command (e.g. not found); exit_code 127
};

std::string encode(const ExecRequest& r);
ExecRequest decode_exec_request(Reader& in);
std::string encode(const ExecResult& r);
ExecResult decode_exec_result(const std::string& bytes);

}  // namespace k3::sandbox::wire
