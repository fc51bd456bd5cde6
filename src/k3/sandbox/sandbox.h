// A sandbox: an isolated environment made from an image, where commands run and files come and
// go, until it is destroyed. Two backends give it (docs/sandbox.md): Linux namespaces under
// bubblewrap, and a KVM microVM with its own kernel. Both talk to the same agent inside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "k3/sandbox/image_store.h"
#include "k3/sandbox/wire.h"

namespace k3::sandbox {

using wire::ExecRequest;
using wire::ExecResult;

// What one sandbox may use. Whole-sandbox limits are cgroups where a writable hierarchy exists;
// per-command limits are rlimits, always. 0: no limit.
struct Limits {
  uint64_t memory_bytes = 512ull << 20;     // cgroup memory (and each command's address space)
  uint64_t processes = 256;                 // cgroup pids (and each command's RLIMIT_NPROC)
  double cpus = 1.0;                        // cgroup CPU quota, in cores
  uint64_t cpu_seconds = 60;                // per command
  uint64_t file_size_bytes = 256ull << 20;  // per file a command writes
  uint64_t open_files = 256;                // per command
  uint64_t disk_bytes = 256ull << 20;       // the writable layer
  uint64_t output_bytes = 1ull << 20;       // per stream of each command
  double timeout_s = 30;                    // each command's wall clock
};

// The host user and group every sandboxed process runs as (uid 1000 inside): no user of the host,
// so a process that got out of its namespaces would own nothing. Image layers belong to it.
constexpr unsigned kSandboxUid = 1879048192;  // 0x70000000

// The least memory and processes a sandbox works with (0 is no limit). Measured on the host
// image: each command's address space is the memory limit, and python3 needs 16 MiB of it
// (/bin/sh 3); bubblewrap, the agent, a shell and one program it starts are 4 processes.
constexpr uint64_t kMinMemoryBytes = 16ull << 20;
constexpr uint64_t kMinProcesses = 4;
// Throws an Error naming the limit of LIMITS too small for a sandbox to work, and the minimum.
void check_limits(const Limits& limits);

// The rlimits every command of a sandbox with LIMITS gets.
wire::Rlimits command_rlimits(const Limits& limits);

class Sandbox {
 public:
  virtual ~Sandbox() = default;
  const std::string& id() const { return id_; }

  // Runs a command (request.rlimits and timeout default to the sandbox's limits where 0). After it
  // ends, nothing it started is left running. A sandbox whose agent stops answering is destroyed
  // and the call throws.
  virtual ExecResult exec(ExecRequest request) = 0;
  // Files inside the sandbox; PATH is absolute and resolves in the sandbox's own root.
  virtual void put(const std::string& path, const std::string& bytes, unsigned mode = 0644) = 0;
  virtual std::string get(const std::string& path) = 0;
  // The writable layer as a new image on top of this sandbox's image; returns its digest.
  virtual std::string snapshot(const std::string& name) = 0;
  // Ends every process and removes every mount, cgroup and file of the sandbox. Idempotent.
  virtual void destroy() = 0;
  virtual bool alive() const = 0;
  // Makes the sandbox as it was when new, for another user, and proves it (docs/sandbox.md,
  // "Reuse"). False when it cannot: a backend without reset, a sandbox that hit a limit or a
  // timeout, or one whose cleaning could not be proven; the caller then destroys it.
  virtual bool reset() { return false; }
  size_t resets() const { return resets_; }  // successful ones so far

 protected:
  std::string id_;
  size_t resets_ = 0;
};

enum class BackendKind { kNamespaces, kMicrovm };
BackendKind parse_backend(const std::string& name);  // "namespaces" or "microvm"; else an Error
const char* backend_name(BackendKind kind);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<Sandbox> create(const Image& image, const Limits& limits) = 0;
  // "" when the backend can run here, else one line saying why not.
  virtual std::string unavailable_reason() const = 0;
};

// STORE keeps images and sandboxes' run directories; it must outlive the backend.
std::unique_ptr<Backend> make_backend(BackendKind kind, ImageStore& store);

// The agent binary: $K3LAB_SANDBOX_AGENT, else k3lab-sandbox-agent beside the running executable.
std::string agent_path();

}  // namespace k3::sandbox
