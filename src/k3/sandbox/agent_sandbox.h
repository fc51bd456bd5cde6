// What both backends' sandboxes share: a child process (bubblewrap, or QEMU) with the agent at the
// other end of a channel, its cgroups and its run directory. Requests are one at a time; a sandbox
// whose agent breaks (goes away, misses a deadline) is destroyed and the request throws.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "k3/sandbox/agent_client.h"
#include "k3/sandbox/cgroups.h"
#include "k3/sandbox/fork_thread.h"
#include "k3/sandbox/image_store.h"
#include "k3/sandbox/sandbox.h"

namespace k3::sandbox {

class AgentSandbox : public Sandbox {
 public:
  ~AgentSandbox() override { destroy(); }
  ExecResult exec(ExecRequest request) override;
  void put(const std::string& path, const std::string& bytes, unsigned mode) override;
  std::string get(const std::string& path) override;
  void destroy() override;
  bool alive() const override { return child_ > 0; }

 protected:
  // RUN: the sandbox's run directory (removed on destroy, with RUN.log). START_DEADLINE_MS bounds
  // the start and each file transfer.
  AgentSandbox(std::string id, Limits limits, ImageStore::RunDir run, int64_t start_deadline_ms);

  // Forks (on FORKER) a child that joins the cgroups, gets the agent channel as stdin and stdout
  // and RUN.log as stderr, then runs SETUP (which must exec); waits for the agent's first answer.
  // Throws an Error with the log's last line if it does not come.
  void start(ForkThread& forker, const std::function<void()>& setup, const char* what);
  pid_t child() const { return child_; }
  // The agent's part of a reset (agent/reset.h), removing REMOVE from the root; call with mutex_
  // held. False when it reports the sandbox not clean, or answers out of step.
  bool reset_agent(const std::vector<std::string>& remove);
  // The writable layer as the agent reads it; call with mutex_ held.
  std::vector<wire::TreeEntry> agent_layer();
  // A command of this sandbox timed out or was killed (a limit, most likely): not to be reused.
  bool tainted() const { return tainted_; }

  Limits limits_;
  ImageStore::RunDir run_;
  Cgroups cgroups_;
  std::mutex mutex_;  // one request at a time

 private:
  void destroy_locked();
  template <typename F>
  auto guarded(F&& f) -> decltype(f());
  AgentClient agent_;
  int64_t start_deadline_ms_;
  std::atomic<pid_t> child_ = -1;
  bool tainted_ = false;
  std::mutex child_mutex_;  // held to signal or reap child_
};

}  // namespace k3::sandbox
