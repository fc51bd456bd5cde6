#include "k3/sandbox/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <ctime>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <thread>

namespace k3::sandbox {
namespace {

// This process's cgroup path in the hierarchy whose /proc/self/cgroup line names CONTROLLER
// ("" for the v2 line "0::/path"); empty optional-like "" result when absent.
bool own_cgroup(const std::string& controller, std::string& path) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    std::stringstream names(list);
    for (std::string n; std::getline(names, n, ',');) {
      if (n == controller) {
        path = line.substr(b + 1);
        return true;
      }
    }
    if (controller.empty() && list.empty() && line.substr(0, a) == "0") {
      path = line.substr(b + 1);
      return true;
    }
  }
  return false;
}

bool write_text(const std::string& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
  out.flush();
  return bool(out);
}

std::string read_text(const std::string& file) {
  std::ifstream in(file);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

Cgroups::Cgroups(const std::string& name, const CgroupLimits& limits) {
  const std::string base = "/sys/fs/cgroup";
  std::string own;
  if (!is_dir(base + "/memory") && !is_dir(base + "/pids") &&
      access((base + "/cgroup.controllers").c_str(), R_OK) == 0 && own_cgroup("", own)) {
    // cgroup v2 alone: one group with every controller its parent delegates.
    const std::string dir = base + own + "/" + name;
    if (mkdir(dir.c_str(), 0755) == 0) {
      v2_ = true;
      groups_.push_back({"unified", dir});
      procs_files_.push_back(dir + "/cgroup.procs");
      const std::string enabled = read_text(dir + "/cgroup.controllers");
      auto has = [&](const char* c) { return enabled.find(c) != std::string::npos; };
      if (limits.memory_bytes && has("memory"))
        write_text(dir + "/memory.max", std::to_string(limits.memory_bytes));
      if (limits.processes && has("pids"))
        write_text(dir + "/pids.max", std::to_string(limits.processes));
      if (limits.cpus > 0 && has("cpu"))
        write_text(dir + "/cpu.max",
                   std::to_string(int64_t(std::lround(limits.cpus * 100000))) + " 100000");
    }
    return;
  }
  auto add = [&](const std::string& controller, auto&& configure) {
    if (!own_cgroup(controller, own) || !is_dir(base + "/" + controller)) return;
    const std::string dir = base + "/" + controller + (own == "/" ? "" : own) + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0) return;
    if (!configure(dir)) {
      rmdir(dir.c_str());
      return;
    }
    groups_.push_back({controller, dir});
    procs_files_.push_back(dir + "/cgroup.procs");
  };
  if (limits.memory_bytes) {
    add("memory", [&](const std::string& d) {
      return write_text(d + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes));
    });
  }
  if (limits.processes) {
    add("pids", [&](const std::string& d) {
      return write_text(d + "/pids.max", std::to_string(limits.processes));
    });
  }
  if (limits.cpus > 0) {
    add("cpu", [&](const std::string& d) {
      return write_text(d + "/cpu.cfs_period_us", "100000") &&
             write_text(d + "/cpu.cfs_quota_us",
                        std::to_string(int64_t(std::lround(limits.cpus * 100000))));
    });
  }
}

Cgroups::Cgroups(Cgroups&& o) noexcept
    : groups_(std::move(o.groups_)), procs_files_(std::move(o.procs_files_)), v2_(o.v2_) {
  o.groups_.clear();
  o.procs_files_.clear();
}

Cgroups& Cgroups::operator=(Cgroups&& o) noexcept {
  if (this != &o) {
    remove();
    groups_ = std::move(o.groups_);
    procs_files_ = std::move(o.procs_files_);
    v2_ = o.v2_;
    o.groups_.clear();
    o.procs_files_.clear();
  }
  return *this;
}

std::vector<std::string> Cgroups::active() const {
  std::vector<std::string> out;
  for (const auto& g : groups_) out.push_back(g.controller + (v2_ ? " (v2)" : " (v1)"));
  return out;
}

uint64_t Cgroups::memory_usage_bytes() const {
  for (const auto& g : groups_) {
    const std::string file = g.controller == "memory" ? g.dir + "/memory.usage_in_bytes"
                             : v2_                    ? g.dir + "/memory.current"
                                                      : "";
    if (file.empty()) continue;
    const std::string text = read_text(file);
    if (!text.empty()) return std::stoull(text);
  }
  return 0;
}

std::vector<pid_t> Cgroups::pids() const {
  std::vector<pid_t> out;
  for (const auto& g : groups_) {
    std::ifstream in(g.dir + "/cgroup.procs");
    for (pid_t p; in >> p;) out.push_back(p);
  }
  return out;
}

uint64_t Cgroups::limit_hits() const {
  // The named counters of a flat-keyed file ("max 3", "oom_kill 1").
  auto count = [](const std::string& file, std::initializer_list<const char*> keys) {
    std::istringstream in(read_text(file));
    uint64_t total = 0, value = 0;
    for (std::string key; in >> key >> value;)
      for (const char* k : keys) total += key == k ? value : 0;
    return total;
  };
  uint64_t hits = 0;
  for (const auto& g : groups_) {
    if (v2_ || g.controller == "pids") hits += count(g.dir + "/pids.events", {"max"});
    if (v2_) hits += count(g.dir + "/memory.events", {"oom", "oom_kill"});
    if (g.controller == "memory") hits += count(g.dir + "/memory.oom_control", {"oom_kill"});
  }
  return hits;
}

void Cgroups::remove() {
  if (groups_.empty()) return;
  for (int round = 0; round < 5000; ++round) {
    const auto members = pids();
    if (members.empty()) break;
    for (pid_t p : members) kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(round < 20 ? 1 : 5));
  }
  for (const auto& g : groups_) {
    // The last members may still be exiting: rmdir is refused (EBUSY) until they are gone.
    for (int round = 0; round < 2000 && rmdir(g.dir.c_str()) != 0 && errno == EBUSY; ++round)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  groups_.clear();
  procs_files_.clear();
}

void remove_stale_cgroups(const std::string& prefix, int min_age_s) {
  const std::string base = "/sys/fs/cgroup";
  std::vector<std::string> parents;
  std::string own;
  for (const char* c : {"memory", "pids", "cpu"})
    if (own_cgroup(c, own)) parents.push_back(base + "/" + c + (own == "/" ? "" : own));
  if (own_cgroup("", own)) parents.push_back(base + own);
  const time_t now = time(nullptr);
  for (const auto& parent : parents) {
    DIR* dir = opendir(parent.c_str());
    if (!dir) continue;
    while (const dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name.rfind(prefix, 0) != 0) continue;
      const std::string path = parent + "/" + name;
      struct stat st {};
      // rmdir refuses a cgroup with members, so a live sandbox's is never removed.
      if (stat(path.c_str(), &st) == 0 && now - st.st_mtime >= min_age_s) rmdir(path.c_str());
    }
    closedir(dir);
  }
}

void remove_cgroups_named(const std::string& name) {
  Cgroups found;
  std::string own;
  for (const char* c : {"memory", "pids", "cpu"})
    if (own_cgroup(c, own))
      found.groups_.push_back({c, "/sys/fs/cgroup/" + std::string(c) + (own == "/" ? "" : own) +
                                      "/" + name});
  if (own_cgroup("", own)) found.groups_.push_back({"unified", "/sys/fs/cgroup" + own + "/" + name});
  std::erase_if(found.groups_, [](const auto& g) { return !is_dir(g.dir); });
  found.remove();
}

bool join_cgroups(const std::vector<std::string>& procs_files) {
  char pid[24];
  int n = 0;
  for (pid_t p = getpid(); p > 0; p /= 10) pid[n++] = char('0' + p % 10);
  for (int i = 0; i < n / 2; ++i) std::swap(pid[i], pid[n - 1 - i]);
  bool ok = true;
  for (const auto& file : procs_files) {
    const int fd = open(file.c_str(), O_WRONLY | O_CLOEXEC);
    ok = fd >= 0 && write(fd, pid, size_t(n)) == n && ok;
    if (fd >= 0) close(fd);
  }
  return ok;
}

}  // namespace k3::sandbox
