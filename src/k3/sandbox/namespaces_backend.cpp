#include "k3/sandbox/namespaces_backend.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "k3/base/error.h"
#include "k3/sandbox/agent_sandbox.h"
#include "k3/sandbox/cgroups.h"
#include "k3/sandbox/leftovers.h"
#include "k3/sandbox/host_process.h"
#include "k3/sandbox/seccomp_policy.h"
#include "k3/sandbox/writable_layer.h"

namespace fs = std::filesystem;

namespace k3::sandbox {

std::string new_sandbox_id(const std::string& prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mutex);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
  return prefix + hex;
}

namespace {

constexpr int64_t kStartDeadlineMs = 20000;  // bubblewrap and the agent answering a ping
constexpr const char* kAgentInside = "/.k3lab-agent";
// A writable layer with more entries than this is destroyed rather than cleaned.
constexpr size_t kMaxEntriesToReset = 10000;

// Everything the child needs, prepared before fork (a child of a threaded process should not
// allocate).
struct SetupPlan {
  std::string run, upper, work, root, shm, agent, agent_copy;
  std::string tmpfs_options, overlay_options;  // overlay_options "": no layers, bind upper as root
  int filter_fd = -1;                          // the compiled seccomp filter, for the agent
  std::vector<char*> argv;
};

constexpr int kFilterFdInside = 3;  // where the agent finds the filter

[[noreturn]] void setup_failed(const char* what) {
  const char* why = std::strerror(errno);
  for (const char* part : {"sandbox setup: ", what, ": ", why, "\n"}) {
    [[maybe_unused]] ssize_t w = write(2, part, std::strlen(part));
  }
  _exit(126);
}

// In the forked child (already in the cgroups, the agent channel on stdin and stdout): makes its
// own mount namespace with the sandbox's root (tmpfs, then overlay), drops to the sandbox user and
// execs bubblewrap.
[[noreturn]] void become_sandbox(const SetupPlan& p) {
  if (unshare(CLONE_NEWNS) != 0) setup_failed("unshare(CLONE_NEWNS)");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    setup_failed("making / private");
  if (mount("k3lab-sandbox", p.run.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
            p.tmpfs_options.c_str()) != 0)
    setup_failed("mounting the writable layer's tmpfs");
  for (const auto* d : {&p.upper, &p.work, &p.root})
    if (mkdir(d->c_str(), 0755) != 0) setup_failed("mkdir in the writable layer");
  // /dev/shm lives on the same tmpfs, so it counts in the disk limit.
  if (mkdir(p.shm.c_str(), 0700) != 0 || chmod(p.shm.c_str(), 01777) != 0)
    setup_failed("mkdir in the writable layer");
  if (chown(p.upper.c_str(), kSandboxUid, kSandboxUid) != 0 ||
      chown(p.root.c_str(), kSandboxUid, kSandboxUid) != 0 ||
      chown(p.shm.c_str(), kSandboxUid, kSandboxUid) != 0)
    setup_failed("chown of the writable layer");
  // The agent, where the sandbox's user can reach it (bwrap binds it into the sandbox).
  const int agent_fd = open(p.agent_copy.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0555);
  if (agent_fd < 0 || close(agent_fd) != 0 ||
      mount(p.agent.c_str(), p.agent_copy.c_str(), nullptr, MS_BIND, nullptr) != 0)
    setup_failed("binding the agent");
  if (p.overlay_options.empty()) {
    if (mount(p.upper.c_str(), p.root.c_str(), nullptr, MS_BIND, nullptr) != 0)
      setup_failed("binding the root");
  } else if (mount("k3lab-sandbox", p.root.c_str(), "overlay", MS_NOSUID | MS_NODEV,
                   p.overlay_options.c_str()) != 0) {
    setup_failed("mounting the overlay");
  }
  // From here on, the sandbox's own unprivileged host user: bubblewrap maps it to uid 1000 inside.
  // Raw system calls: glibc's wrappers would signal the threads of the process whose memory this
  // child borrows (ForkThread).
  const gid_t gid = kSandboxUid;
  if (syscall(SYS_setgroups, 1, &gid) != 0 || syscall(SYS_setresgid, gid, gid, gid) != 0 ||
      syscall(SYS_setresuid, kSandboxUid, kSandboxUid, kSandboxUid) != 0)
    setup_failed("dropping to the sandbox user");
  // The filter, open across the execs of bubblewrap and the agent (dup2 clears close-on-exec).
  if (p.filter_fd >= 0 && (p.filter_fd == kFilterFdInside ? fcntl(p.filter_fd, F_SETFD, 0)
                                                          : dup2(p.filter_fd, kFilterFdInside)) < 0)
    setup_failed("passing the seccomp filter");
  execv(p.argv[0], p.argv.data());
  setup_failed("exec bwrap");
}

class NamespacesSandbox : public AgentSandbox {
 public:
  NamespacesSandbox(ImageStore& store, ForkThread& forker, Image image, const Limits& limits,
                    const std::string& bwrap, const std::string& agent, int filter_fd,
                    const std::string& id)
      : AgentSandbox(id, limits, store.make_run_dir(id), kStartDeadlineMs),
        store_(store),
        image_(std::move(image)) {
    try {
      cgroups_ = Cgroups("k3lab-" + id_, {limits_.memory_bytes, limits_.processes, limits_.cpus});
      const SetupPlan plan = plan_setup(bwrap, agent, filter_fd);
      start(
          forker, [&] { become_sandbox(plan); }, "sandbox");
      start_layer_ = read_layer(upper());
      start_processes_ = cgroups_.pids().size();
    } catch (...) {
      destroy();
      throw;
    }
  }

  std::string snapshot(const std::string& name) override {
    std::lock_guard lock(mutex_);
    K3_CHECK(child() > 0, "sandbox ", id_, " is destroyed");
    return store_.add_layer(image_, upper(), name, mount_points_);
  }

  bool reset() override {
    std::lock_guard lock(mutex_);
    if (child() <= 0 || tainted() || cgroups_.limit_hits() != 0) return false;
    std::vector<std::string> added;
    // An entry the sandbox started with that differs may only have other permissions or extended
    // attributes, which the agent's reset restores: then look again.
    const auto list_added = [&] {
      return added_entries(upper(), start_layer_, image_.layers, kMaxEntriesToReset, added);
    };
    if (!list_added() && !(reset_agent({}) && list_added())) return false;
    if (!reset_agent(added)) return false;
    // Proof, from outside: the writable layer as it started, and no process but the sandbox's own
    // (bubblewrap's and the agent).
    if (!list_added() || !added.empty() || cgroups_.pids().size() != start_processes_) return false;
    ++resets_;
    return true;
  }

 private:
  // The writable layer is visible only in the sandbox's mount namespace: reach it through the
  // root of its first process. No command runs meanwhile (the agent is idle between requests).
  std::string upper() const {
    return "/proc/" + std::to_string(child()) + "/root" + run_.path() + "/upper";
  }

  SetupPlan plan_setup(const std::string& bwrap, const std::string& agent, int filter_fd) {
    args_ = bwrap_isolation_flags(bwrap);
    args_.insert(args_.end(), {"--hostname", "sandbox", "--bind", run_.path() + "/root", "/"});
    if (image_.host_system) add_host_system(args_, &mount_points_);
    // bubblewrap's /dev is a tmpfs of no size limit: read-only, but for /dev/shm, which is on the
    // writable layer's tmpfs.
    args_.insert(args_.end(), {"--proc", "/proc", "--dev", "/dev"});
    args_.insert(args_.end(), {"--bind", run_.path() + "/shm", "/dev/shm", "--remount-ro", "/dev"});
    args_.insert(args_.end(), {"--perms", "1777", "--dir", "/tmp", "--ro-bind", run_.path() + "/agent",
                               kAgentInside, "--chdir", "/", "--", kAgentInside, "--stdio"});
    if (filter_fd >= 0) args_.insert(args_.end(), {"--filter-fd", std::to_string(kFilterFdInside)});
    mount_points_.insert(mount_points_.end(), {"/proc", "/dev", kAgentInside});
    SetupPlan plan;
    plan.run = run_.path();
    plan.filter_fd = filter_fd;
    plan.upper = run_.path() + "/upper";
    plan.work = run_.path() + "/work";
    plan.root = run_.path() + "/root";
    plan.shm = run_.path() + "/shm";
    plan.agent = agent;
    plan.agent_copy = run_.path() + "/agent";
    // Layers are stacked top first in lowerdir; the tmpfs's size is the disk limit.
    if (!image_.layers.empty()) {
      plan.overlay_options = "lowerdir=";
      for (auto it = image_.layers.rbegin(); it != image_.layers.rend(); ++it)
        plan.overlay_options += (it == image_.layers.rbegin() ? "" : ":") + *it;
      plan.overlay_options += ",upperdir=" + plan.upper + ",workdir=" + plan.work;
    }
    plan.tmpfs_options =
        "size=" + std::to_string(limits_.disk_bytes ? limits_.disk_bytes : (1ull << 30)) +
        ",mode=0755";
    for (auto& a : args_) plan.argv.push_back(a.data());
    plan.argv.push_back(nullptr);
    return plan;
  }

  ImageStore& store_;
  Image image_;
  std::vector<std::string> args_;          // bubblewrap's command line (plan.argv points here)
  std::vector<std::string> mount_points_;  // what bubblewrap adds to the root; not in snapshots
  LayerState start_layer_;                 // the writable layer when the sandbox was new
  size_t start_processes_ = 0;             // in its cgroups then
};

}  // namespace

std::vector<std::string> bwrap_isolation_flags(const std::string& bwrap) {
  return {bwrap,
          "--unshare-user",
          "--uid",
          "1000",
          "--gid",
          "1000",
          "--disable-userns",
          "--unshare-pid",
          "--as-pid-1",  // no init of bubblewrap's own: one process fewer to start
          "--unshare-net",
          "--unshare-ipc",
          "--unshare-uts",
          "--unshare-cgroup-try",
          "--die-with-parent",
          "--new-session",
          "--cap-drop",
          "ALL",
          "--clearenv"};
}

void add_host_system(std::vector<std::string>& args, std::vector<std::string>* mount_points) {
  for (const char* dir : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st {};
    if (lstat(dir, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      args.insert(args.end(), {"--symlink", fs::read_symlink(dir).string(), dir});
    } else if (S_ISDIR(st.st_mode)) {
      args.insert(args.end(), {"--ro-bind", dir, dir});
    }
    if (mount_points) mount_points->push_back(dir);
  }
}

NamespacesBackend::NamespacesBackend(ImageStore& store)
    : store_(store), bwrap_(find_program("bwrap")) {
  remove_leftovers(store_);  // of sandboxes whose process was killed
  remove_stale_cgroups("k3lab-ns-", 60);
  try {
    agent_ = agent_path();
  } catch (const Error& e) {
    agent_error_ = e.message();
  }
  // Compiled once here rather than by each sandbox's agent (which does so itself without it).
  std::vector<sock_filter> program;
  if (compile_seccomp_filter(program).empty()) filter_fd_ = seccomp_program_fd(program);
}

NamespacesBackend::~NamespacesBackend() {
  if (filter_fd_ >= 0) close(filter_fd_);
}

std::string NamespacesBackend::unavailable_reason() const {
  if (bwrap_.empty()) return "bwrap is not installed (Debian package bubblewrap)";
  if (!agent_error_.empty()) return agent_error_;
  if (geteuid() != 0)
    return "the namespaces backend mounts its overlays as root; run k3lab as root";
  return "";
}

std::unique_ptr<Sandbox> NamespacesBackend::create(const Image& image, const Limits& limits) {
  if (const std::string why = unavailable_reason(); !why.empty()) throw Error(why);
  check_limits(limits);
  return std::make_unique<NamespacesSandbox>(store_, forker_, image, limits, bwrap_, agent_,
                                             filter_fd_, new_sandbox_id("ns-"));
}

}  // namespace k3::sandbox
