// A sandbox's cgroups: memory, pids and CPU, in whichever hierarchy is writable here (cgroup v1
// controllers, or a cgroup v2 tree with those controllers enabled). Best effort: a controller
// that cannot be used is left out (rlimits still apply), and active() says which are in force.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace k3::sandbox {

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0: no limit
  uint64_t processes = 0;
  double cpus = 0;
};

class Cgroups {
 public:
  Cgroups() = default;
  // Creates a cgroup named NAME below this process's own, in each usable controller.
  Cgroups(const std::string& name, const CgroupLimits& limits);
  ~Cgroups() { remove(); }
  Cgroups(Cgroups&& o) noexcept;
  Cgroups& operator=(Cgroups&& o) noexcept;
  Cgroups(const Cgroups&) = delete;
  Cgroups& operator=(const Cgroups&) = delete;

  // The files a new process writes its pid into to join (safe to use between fork and exec).
  const std::vector<std::string>& procs_files() const { return procs_files_; }
  std::vector<std::string> active() const;  // "memory", "pids", "cpu" (with "v1"/"v2")
  uint64_t memory_usage_bytes() const;      // 0 without a memory cgroup
  std::vector<pid_t> pids() const;
  // How often a limit was enforced on a member: processes refused at the pids limit, and OOM
  // kills (counters that only grow; a sandbox whose count is not 0 hit its limits).
  uint64_t limit_hits() const;
  // SIGKILLs every member until none is left, then removes the cgroups. Idempotent.
  void remove();

 private:
  friend void remove_cgroups_named(const std::string& name);
  struct Group {
    std::string controller;  // "memory", "pids", "cpu" or "unified"
    std::string dir;
  };
  std::vector<Group> groups_;
  std::vector<std::string> procs_files_;
  bool v2_ = false;
};

// Removes the empty cgroups whose names start with PREFIX, below this process's own in each
// hierarchy, that are older than MIN_AGE_S: what a k3lab that was killed left behind.
void remove_stale_cgroups(const std::string& prefix, int min_age_s);

// Removes the cgroups named NAME below this process's own, SIGKILLing their members first (what
// an abandoned sandbox left: see ImageStore::remove_abandoned_runs).
void remove_cgroups_named(const std::string& name);

// Joins the cgroups by writing this process's pid to each file: for a forked child before exec
// (only async-signal-safe calls). Returns false if any write failed.
bool join_cgroups(const std::vector<std::string>& procs_files);

}  // namespace k3::sandbox
