// The namespaces backend: each sandbox is bubblewrap (user, mount, PID, network, IPC and UTS
// namespaces, every capability dropped, no network but its own loopback) around the agent, on a
// root made of the image's layers read-only under a private writable layer (overlayfs on a tmpfs
// of the disk limit's size), in its own cgroups. The overlay lives in a mount namespace of the
// sandbox's own, so nothing is ever mounted on the host and nothing is left mounted if k3lab dies.
#pragma once

#include "k3/sandbox/fork_thread.h"
#include "k3/sandbox/sandbox.h"

namespace k3::sandbox {

// Sandboxes must not outlive the backend that made them.
class NamespacesBackend : public Backend {
 public:
  explicit NamespacesBackend(ImageStore& store);
  ~NamespacesBackend() override;
  std::unique_ptr<Sandbox> create(const Image& image, const Limits& limits) override;
  std::string unavailable_reason() const override;

 private:
  ImageStore& store_;
  ForkThread forker_;  // every sandbox's bubblewrap is its child; they end when it does
  std::string bwrap_, agent_, agent_error_;
  int filter_fd_ = -1;  // the seccomp filter, compiled once, handed to every agent (or -1)
};

// The namespaces and restrictions of every sandbox's bubblewrap command (its start: no root and
// no mounts yet).
std::vector<std::string> bwrap_isolation_flags(const std::string& bwrap);
// Appends the built-in image's host directories: read-only binds, or the same symlinks; each also
// goes to MOUNT_POINTS (when given).
void add_host_system(std::vector<std::string>& args, std::vector<std::string>* mount_points);

// A fresh random sandbox id: PREFIX and 16 hex digits.
std::string new_sandbox_id(const std::string& prefix);

}  // namespace k3::sandbox
