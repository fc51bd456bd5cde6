#include "k3/sandbox/wire.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace k3::sandbox::wire {

void Writer::u64(uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out_.append(b, 8);
}

void Writer::str(const std::string& s) {
  u64(s.size());
  out_ += s;
}

void Writer::strs(const std::vector<std::string>& v) {
  u64(v.size());
  for (const auto& s : v) str(s);
}

void Reader::need(size_t n) const {
  if (n > in_.size() - at_) throw WireError("truncated message");
}

uint64_t Reader::u64() {
  need(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(in_[at_ + i])) << (8 * i);
  at_ += 8;
  return v;
}

std::string Reader::str() {
  const uint64_t n = u64();
  need(n);
  std::string s = in_.substr(at_, n);
  at_ += n;
  return s;
}

std::vector<std::string> Reader::strs() {
  const uint64_t n = u64();
  // Each string has at least its length (divided, as n * 8 could overflow).
  if (n > (in_.size() - at_) / 8) throw WireError("truncated message");
  std::vector<std::string> v;
  v.reserve(n);
  for (uint64_t i = 0; i < n; ++i) v.push_back(str());
  return v;
}

namespace {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw WireError(std::string("write to the sandbox agent: ") + std::strerror(errno));
    p += w;
    n -= size_t(w);
  }
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

void read_all(int fd, char* p, size_t n, int64_t deadline_ms) {
  const int64_t end = deadline_ms < 0 ? -1 : now_ms() + deadline_ms;
  while (n > 0) {
    if (end >= 0) {
      const int64_t left = end - now_ms();
      if (left <= 0) throw WireError("no reply from the sandbox agent in time");
      pollfd pfd{fd, POLLIN, 0};
      const int r = ::poll(&pfd, 1, int(left));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) continue;
    }
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw WireError(std::string("read from the sandbox agent: ") + std::strerror(errno));
    if (got == 0) throw WireError("the sandbox agent went away");
    p += got;
    n -= size_t(got);
  }
}

}  // namespace

void write_frame(int fd, const std::string& payload) {
  if (payload.size() > kMaxFrame) throw WireError("message too large");
  Writer len;
  len.u64(payload.size());
  write_all(fd, len.bytes().data(), 8);
  write_all(fd, payload.data(), payload.size());
}

void write_bytes(int fd, std::string_view bytes) { write_all(fd, bytes.data(), bytes.size()); }

std::string read_frame(int fd, int64_t deadline_ms) {
  char len_bytes[8];
  read_all(fd, len_bytes, 8, deadline_ms);
  Reader len(std::string(len_bytes, 8));
  const uint64_t n = len.u64();
  if (n > kMaxFrame) throw WireError("message too large");
  std::string payload(n, '\0');
  read_all(fd, payload.data(), n, deadline_ms);
  return payload;
}

std::string encode(const ExecRequest& r) {
  Writer w;
  w.u64(uint64_t(Op::kExec));
  w.strs(r.argv);
  w.strs(r.env);
  w.str(r.cwd);
  w.str(r.stdin_data);
  w.u64(r.timeout_ms);
  w.u64(r.output_cap_bytes);
  w.u64(r.rlimits.address_space_bytes);
  w.u64(r.rlimits.processes);
  w.u64(r.rlimits.cpu_seconds);
  w.u64(r.rlimits.file_size_bytes);
  w.u64(r.rlimits.open_files);
  return w.bytes();
}

ExecRequest decode_exec_request(Reader& in) {
  ExecRequest r;
  r.argv = in.strs();
  r.env = in.strs();
  r.cwd = in.str();
  r.stdin_data = in.str();
  r.timeout_ms = in.u64();
  r.output_cap_bytes = in.u64();
  r.rlimits.address_space_bytes = in.u64();
  r.rlimits.processes = in.u64();
  r.rlimits.cpu_seconds = in.u64();
  r.rlimits.file_size_bytes = in.u64();
  r.rlimits.open_files = in.u64();
  return r;
}

std::string encode(const ExecResult& r) {
  Writer w;
  w.u64(uint64_t(r.exit_code));
  w.u64(uint64_t(r.signal));
  w.u64(r.timed_out);
  w.str(r.stdout_data);
  w.str(r.stderr_data);
  w.u64(r.stdout_truncated);
  w.u64(r.stderr_truncated);
  w.u64(r.wall_ms);
  w.str(r.error);
  return w.bytes();
}

ExecResult decode_exec_result(const std::string& bytes) {
  Reader in(bytes);
  ExecResult r;
  r.exit_code = int64_t(in.u64());
  r.signal = int64_t(in.u64());
  r.timed_out = in.u64() != 0;
  r.stdout_data = in.str();
  r.stderr_data = in.str();
  r.stdout_truncated = in.u64() != 0;
  r.stderr_truncated = in.u64() != 0;
  r.wall_ms = in.u64();
  r.error = in.str();
  return r;
}

std::string encode(const std::vector<TreeEntry>& tree) {
  Writer w;
  w.u64(tree.size());
  for (const auto& e : tree) {
    w.str(e.path);
    w.u64(e.mode);
    w.str(e.data);
    w.u64(e.opaque);
  }
  return w.bytes();
}

std::vector<TreeEntry> decode_tree(const std::string& bytes) {
  Reader in(bytes);
  const uint64_t n = in.u64();
  if (n > bytes.size() / 32) throw WireError("truncated message");  // each entry has 4 fields
  std::vector<TreeEntry> tree(n);
  for (auto& e : tree) {
    e.path = in.str();
    e.mode = in.u64();
    e.data = in.str();
    e.opaque = in.u64() != 0;
  }
  return tree;
}

}  // namespace k3::sandbox::wire
