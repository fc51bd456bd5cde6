#include "k3/sandbox/sandbox.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "k3/base/error.h"
#include "k3/sandbox/microvm_backend.h"
#include "k3/sandbox/namespaces_backend.h"

namespace k3::sandbox {

void check_limits(const Limits& limits) {
  K3_CHECK(limits.memory_bytes == 0 || limits.memory_bytes >= kMinMemoryBytes, "a memory limit of ",
           limits.memory_bytes / double(1 << 20), " MiB is too small: a sandbox needs at least ",
           kMinMemoryBytes >> 20, " MiB (each command's address space is limited to it)");
  K3_CHECK(limits.processes == 0 || limits.processes >= kMinProcesses, "a limit of ",
           limits.processes, " processes is too small: a sandbox needs at least ", kMinProcesses,
           " (bubblewrap, the agent, a shell and a program it starts)");
}

wire::Rlimits command_rlimits(const Limits& limits) {
  wire::Rlimits r;
  r.address_space_bytes = limits.memory_bytes;
  r.processes = limits.processes;
  r.cpu_seconds = limits.cpu_seconds;
  r.file_size_bytes = limits.file_size_bytes;
  r.open_files = limits.open_files;
  return r;
}

BackendKind parse_backend(const std::string& name) {
  if (name == "namespaces") return BackendKind::kNamespaces;
  if (name == "microvm") return BackendKind::kMicrovm;
  throw Error("unknown sandbox backend '" + name + "' (namespaces, microvm)");
}

const char* backend_name(BackendKind kind) {
  return kind == BackendKind::kNamespaces ? "namespaces" : "microvm";
}

std::unique_ptr<Backend> make_backend(BackendKind kind, ImageStore& store) {
  if (kind == BackendKind::kNamespaces) return std::make_unique<NamespacesBackend>(store);
  return std::make_unique<MicrovmBackend>(store);
}

std::string agent_path() {
  if (const char* env = std::getenv("K3LAB_SANDBOX_AGENT"); env && *env) return env;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string path = (self.parent_path() / "k3lab-sandbox-agent").string();
  K3_CHECK(!ec && access(path.c_str(), X_OK) == 0, "the sandbox agent ", path,
           " is missing (build the k3lab-sandbox-agent target, or set K3LAB_SANDBOX_AGENT)");
  return path;
}

}  // namespace k3::sandbox
