#include "k3/sandbox/agent_sandbox.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "k3/base/error.h"
#include "k3/sandbox/host_process.h"
#include "k3/sandbox/namespaces_backend.h"

namespace fs = std::filesystem;

namespace k3::sandbox {

namespace {
constexpr int64_t kReplyGraceMs = 5000;  // beyond a command's own timeout
}

AgentSandbox::AgentSandbox(std::string id, Limits limits, ImageStore::RunDir run,
                           int64_t start_deadline_ms)
    : limits_(limits), run_(std::move(run)), start_deadline_ms_(start_deadline_ms) {
  id_ = std::move(id);
}

void AgentSandbox::start(ForkThread& forker, const std::function<void()>& setup, const char* what) {
  int to_agent[2], from_agent[2];
  K3_CHECK(pipe2(to_agent, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
  if (pipe2(from_agent, O_CLOEXEC) != 0) {
    ::close(to_agent[0]);
    ::close(to_agent[1]);
    throw Error(std::string("pipe: ") + std::strerror(errno));
  }
  const int log = open((run_.path() + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const std::vector<std::string> procs = cgroups_.procs_files();
  const pid_t pid = forker.fork([&] {
    // Only plain system calls from here on (a child of a threaded process).
    if (!join_cgroups(procs) || dup2(to_agent[0], 0) < 0 || dup2(from_agent[1], 1) < 0 ||
        dup2(log, 2) < 0)
      _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // k3lab blocks its stop signals in every thread
    setup();
    _exit(127);
  });
  ::close(to_agent[0]);
  ::close(from_agent[1]);
  if (log >= 0) ::close(log);
  agent_.attach(to_agent[1], from_agent[0]);
  K3_CHECK(pid > 0, "fork: ", std::strerror(errno));
  child_ = pid;
  try {
    agent_.await_ready(start_deadline_ms_);
  } catch (const std::exception& e) {
    std::ifstream in(run_.path() + ".log");
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    throw Error(std::string(what) + " " + id_ +
                " did not start: " + (last.empty() ? e.what() : last));
  }
}

template <typename F>
auto AgentSandbox::guarded(F&& f) -> decltype(f()) {
  K3_CHECK(child_ > 0, "sandbox ", id_, " is destroyed");
  try {
    return f();
  } catch (const wire::WireError& e) {
    const std::string why = e.what();
    destroy_locked();
    throw Error("sandbox " + id_ + " stopped answering (" + why + "); it was destroyed");
  }
}

ExecResult AgentSandbox::exec(ExecRequest q) {
  std::lock_guard lock(mutex_);
  if (q.timeout_ms == 0) q.timeout_ms = uint64_t(std::llround(limits_.timeout_s * 1000));
  if (q.output_cap_bytes == 0) q.output_cap_bytes = limits_.output_bytes;
  if (q.rlimits.processes == 0 && q.rlimits.address_space_bytes == 0)
    q.rlimits = command_rlimits(limits_);
  ExecResult r = guarded([&] { return agent_.exec(q, int64_t(q.timeout_ms) + kReplyGraceMs); });
  if (r.timed_out || r.signal == SIGKILL) tainted_ = true;
  return r;
}

bool AgentSandbox::reset_agent(const std::vector<std::string>& remove) {
  if (child_ <= 0 || tainted_) return false;
  const std::string nonce = new_sandbox_id("reset-");
  try {
    return guarded([&] { return agent_.reset(nonce, remove, start_deadline_ms_) == nonce; });
  } catch (const Error&) {
    return false;  // the agent's reason: the sandbox is not clean
  }
}

std::vector<wire::TreeEntry> AgentSandbox::agent_layer() {
  return guarded([&] { return agent_.layer(start_deadline_ms_); });
}

void AgentSandbox::put(const std::string& path, const std::string& bytes, unsigned mode) {
  std::lock_guard lock(mutex_);
  guarded([&] {
    agent_.put(path, bytes, mode, start_deadline_ms_);
    return 0;
  });
}

std::string AgentSandbox::get(const std::string& path) {
  std::lock_guard lock(mutex_);
  return guarded([&] { return agent_.get(path, start_deadline_ms_); });
}

void AgentSandbox::destroy() {
  {
    // First end the sandbox under any request in flight, which then fails at once.
    std::lock_guard lock(child_mutex_);
    if (child_ > 0) kill(child_, SIGKILL);
  }
  std::lock_guard lock(mutex_);
  destroy_locked();
}

void AgentSandbox::destroy_locked() {
  agent_.close();  // the agent exits at end of file; the kill below does not wait for it
  {
    std::lock_guard lock(child_mutex_);
    kill_and_reap(child_);
    child_ = -1;
  }
  cgroups_.remove();  // SIGKILLs whatever is left in them first
  std::error_code ec;
  if (!run_.path().empty()) {
    fs::remove_all(run_.path(), ec);
    fs::remove(run_.path() + ".log", ec);
    run_ = {};  // unlocked once removed
  }
}

}  // namespace k3::sandbox
