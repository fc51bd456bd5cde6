#include "k3/sandbox/namespaces_backend.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
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
#include "k3/sandbox/agent_client.h"
#include "k3/sandbox/cgroups.h"
#include "k3/sandbox/host_process.h"

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
constexpr int64_t kReplyGraceMs = 5000;      // beyond a command's own timeout
constexpr const char* kAgentInside = "/.k3lab-agent";

// The host directories of the built-in image: bound read-only, or recreated as the same symlink.
// Each becomes a mount point (or symlink) in the sandbox's writable layer.
void add_host_system(std::vector<std::string>& args, std::vector<std::string>& mount_points) {
  for (const char* dir : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st {};
    if (lstat(dir, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      args.insert(args.end(), {"--symlink", fs::read_symlink(dir).string(), dir});
    } else if (S_ISDIR(st.st_mode)) {
      args.insert(args.end(), {"--ro-bind", dir, dir});
    }
    mount_points.push_back(dir);
  }
}

// The forked child that becomes bubblewrap: joins the cgroups, makes its own mount namespace with
// the sandbox's root (tmpfs, then overlay), and execs. Only plain system calls from here on.
// Everything the child needs, prepared before fork (a child of a threaded process should not
// allocate).
struct SetupPlan {
  std::vector<std::string> procs_files;
  std::string run, upper, work, root, agent, agent_copy;
  std::string tmpfs_options, overlay_options;  // overlay_options "": no layers, bind upper as root
  std::vector<char*> argv;
  int to_agent = -1, from_agent = -1, log = -1;
};

[[noreturn]] void setup_failed(int log, const char* what) {
  const char* why = std::strerror(errno);
  for (const char* part : {"sandbox setup: ", what, ": ", why, "\n"}) {
    [[maybe_unused]] ssize_t w = write(log, part, std::strlen(part));
  }
  _exit(126);
}

// The forked child that becomes bubblewrap: joins the cgroups, makes its own mount namespace with
// the sandbox's root (tmpfs, then overlay), and execs.
[[noreturn]] void become_sandbox(const SetupPlan& p) {
  if (!join_cgroups(p.procs_files)) setup_failed(p.log, "joining the sandbox's cgroups");
  if (unshare(CLONE_NEWNS) != 0) setup_failed(p.log, "unshare(CLONE_NEWNS)");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    setup_failed(p.log, "making / private");
  if (mount("k3lab-sandbox", p.run.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
            p.tmpfs_options.c_str()) != 0)
    setup_failed(p.log, "mounting the writable layer's tmpfs");
  for (const auto* d : {&p.upper, &p.work, &p.root})
    if (mkdir(d->c_str(), 0755) != 0) setup_failed(p.log, "mkdir in the writable layer");
  if (chown(p.upper.c_str(), kSandboxUid, kSandboxUid) != 0 ||
      chown(p.root.c_str(), kSandboxUid, kSandboxUid) != 0)
    setup_failed(p.log, "chown of the writable layer");
  // The agent, where the sandbox's user can reach it (bwrap binds it into the sandbox).
  const int agent_fd = open(p.agent_copy.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0555);
  if (agent_fd < 0 || close(agent_fd) != 0 ||
      mount(p.agent.c_str(), p.agent_copy.c_str(), nullptr, MS_BIND, nullptr) != 0)
    setup_failed(p.log, "binding the agent");
  if (p.overlay_options.empty()) {
    if (mount(p.upper.c_str(), p.root.c_str(), nullptr, MS_BIND, nullptr) != 0)
      setup_failed(p.log, "binding the root");
  } else if (mount("k3lab-sandbox", p.root.c_str(), "overlay", MS_NOSUID | MS_NODEV,
                   p.overlay_options.c_str()) != 0) {
    setup_failed(p.log, "mounting the overlay");
  }
  if (dup2(p.to_agent, 0) < 0 || dup2(p.from_agent, 1) < 0 || dup2(p.log, 2) < 0)
    setup_failed(p.log, "dup2");
  // From here on, the sandbox's own unprivileged host user: bubblewrap maps it to uid 1000 inside.
  const gid_t gid = kSandboxUid;
  if (setgroups(1, &gid) != 0 || setresgid(gid, gid, gid) != 0 ||
      setresuid(kSandboxUid, kSandboxUid, kSandboxUid) != 0)
    setup_failed(p.log, "dropping to the sandbox user");
  execv(p.argv[0], p.argv.data());
  setup_failed(p.log, "exec bwrap");
}

class NamespacesSandbox : public Sandbox {
 public:
  NamespacesSandbox(ImageStore& store, ForkThread& forker, Image image, Limits limits,
                    const std::string& bwrap, const std::string& agent)
      : store_(store), forker_(forker), image_(std::move(image)), limits_(limits) {
    id_ = new_sandbox_id("ns-");
    try {
      start(bwrap, agent);
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~NamespacesSandbox() override { destroy(); }

  ExecResult exec(ExecRequest q) override {
    std::lock_guard lock(mutex_);
    if (q.timeout_ms == 0) q.timeout_ms = uint64_t(std::llround(limits_.timeout_s * 1000));
    if (q.output_cap_bytes == 0) q.output_cap_bytes = limits_.output_bytes;
    if (q.rlimits.processes == 0 && q.rlimits.address_space_bytes == 0)
      q.rlimits = command_rlimits(limits_);
    return guarded([&] { return agent_.exec(q, int64_t(q.timeout_ms) + kReplyGraceMs); });
  }

  void put(const std::string& path, const std::string& bytes, unsigned mode) override {
    std::lock_guard lock(mutex_);
    guarded([&] {
      agent_.put(path, bytes, mode, kStartDeadlineMs);
      return 0;
    });
  }

  std::string get(const std::string& path) override {
    std::lock_guard lock(mutex_);
    return guarded([&] { return agent_.get(path, kStartDeadlineMs); });
  }

  std::string snapshot(const std::string& name) override {
    std::lock_guard lock(mutex_);
    K3_CHECK(holder_ > 0, "sandbox ", id_, " is destroyed");
    // The writable layer is visible only in the sandbox's mount namespace: reach it through the
    // root of its first process. No command runs meanwhile (the agent is idle between requests).
    const std::string upper = "/proc/" + std::to_string(holder_) + "/root" + run_ + "/upper";
    return store_.add_layer(image_, upper, name, mount_points_);
  }

  void destroy() override {
    {
      // First end the sandbox under any request in flight, which then fails at once.
      std::lock_guard lock(holder_mutex_);
      if (holder_ > 0) kill(holder_, SIGKILL);
    }
    std::lock_guard lock(mutex_);
    destroy_locked();
  }

  bool alive() const override { return holder_ > 0; }

 private:
  void destroy_locked() {
    agent_.close();  // the agent exits at end of file; the kill below does not wait for it
    {
      std::lock_guard lock(holder_mutex_);
      kill_and_reap(holder_);  // bubblewrap's PID 1 dies with it, and the PID namespace with that
      holder_ = -1;
    }
    cgroups_.remove();
    std::error_code ec;
    if (!run_.empty()) {
      fs::remove(run_, ec);
      fs::remove(run_ + ".log", ec);
      run_.clear();
    }
  }

  // Runs F; if the agent broke (went away, missed its deadline), the sandbox is destroyed.
  template <typename F>
  auto guarded(F&& f) -> decltype(f()) {
    K3_CHECK(holder_ > 0, "sandbox ", id_, " is destroyed");
    try {
      return f();
    } catch (const wire::WireError& e) {
      const std::string why = e.what();
      destroy_locked();
      throw Error("sandbox " + id_ + " stopped answering (" + why + "); it was destroyed");
    }
  }

  void start(const std::string& bwrap, const std::string& agent) {
    run_ = store_.make_run_dir(id_);
    cgroups_ = Cgroups("k3lab-" + id_, {limits_.memory_bytes, limits_.processes, limits_.cpus});
    std::vector<std::string> args = {bwrap,
                                     "--unshare-user",
                                     "--uid",
                                     "1000",
                                     "--gid",
                                     "1000",
                                     "--disable-userns",
                                     "--unshare-pid",
                                     "--unshare-net",
                                     "--unshare-ipc",
                                     "--unshare-uts",
                                     "--unshare-cgroup-try",
                                     "--die-with-parent",
                                     "--new-session",
                                     "--cap-drop",
                                     "ALL",
                                     "--hostname",
                                     "sandbox",
                                     "--clearenv",
                                     "--bind",
                                     run_ + "/root",
                                     "/"};
    if (image_.host_system) add_host_system(args, mount_points_);
    mount_points_.insert(mount_points_.end(), {"/proc", "/dev", kAgentInside});
    args.insert(args.end(),
                {"--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--dir", "/tmp",
                 "--ro-bind", run_ + "/agent", kAgentInside, "--chdir", "/", "--", kAgentInside});
    SetupPlan plan;
    plan.procs_files = cgroups_.procs_files();
    plan.run = run_;
    plan.upper = run_ + "/upper";
    plan.work = run_ + "/work";
    plan.root = run_ + "/root";
    plan.agent = agent;
    plan.agent_copy = run_ + "/agent";
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
    for (auto& a : args) plan.argv.push_back(a.data());
    plan.argv.push_back(nullptr);

    int to_agent[2], from_agent[2];
    K3_CHECK(pipe2(to_agent, O_CLOEXEC) == 0 && pipe2(from_agent, O_CLOEXEC) == 0,
             "pipe: ", std::strerror(errno));
    plan.to_agent = to_agent[0];
    plan.from_agent = from_agent[1];
    plan.log = open((run_ + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const pid_t child = forker_.fork([&] { become_sandbox(plan); });
    holder_ = child;
    ::close(to_agent[0]);
    ::close(from_agent[1]);
    if (plan.log >= 0) ::close(plan.log);
    agent_.attach(to_agent[1], from_agent[0]);
    K3_CHECK(holder_ > 0, "fork: ", std::strerror(errno));
    try {
      agent_.ping(kStartDeadlineMs);
    } catch (const std::exception& e) {
      std::string line;
      std::ifstream in(run_ + ".log");
      std::getline(in, line);
      throw Error("sandbox " + id_ + " did not start: " + (line.empty() ? e.what() : line));
    }
  }

  ImageStore& store_;
  ForkThread& forker_;
  Image image_;
  Limits limits_;
  std::string run_;
  std::vector<std::string> mount_points_;  // what bubblewrap adds to the root; not in snapshots
  Cgroups cgroups_;
  AgentClient agent_;
  std::atomic<pid_t> holder_ = -1;  // bubblewrap's outer process, our child
  std::mutex mutex_;                // one request at a time
  std::mutex holder_mutex_;         // held to signal or reap holder_
};

}  // namespace

NamespacesBackend::NamespacesBackend(ImageStore& store)
    : store_(store), bwrap_(find_program("bwrap")) {
  remove_stale_cgroups("k3lab-ns-", 60);
  try {
    agent_ = agent_path();
  } catch (const Error& e) {
    agent_error_ = e.message();
  }
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
  return std::make_unique<NamespacesSandbox>(store_, forker_, image, limits, bwrap_, agent_);
}

}  // namespace k3::sandbox
