#include "guest_init.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace k3::sandbox::agent {
namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "k3lab guest init: %s: %s\n", what.c_str(), std::strerror(errno));
  sync();
  reboot(RB_POWER_OFF);
  _exit(1);
}

std::string kernel_cmdline() {
  std::ifstream in("/proc/cmdline");
  std::string s;
  std::getline(in, s);
  return s;
}

// "NAME=VALUE" of the command line, or FALLBACK.
std::string cmdline_value(const std::string& cmdline, const std::string& name,
                          const std::string& fallback) {
  std::istringstream words(cmdline);
  for (std::string w; words >> w;)
    if (w.rfind(name + "=", 0) == 0) return w.substr(name.size() + 1);
  return fallback;
}

// Loads /modules/*.ko in name order (they are numbered in dependency order). Parameters given on
// the kernel command line as MODULE.PARAM=VALUE are passed along, as modprobe would.
void load_modules(const std::string& cmdline) {
  std::vector<std::string> files;
  if (DIR* d = opendir("/modules")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') files.push_back(e->d_name);
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    // "03-virtio_mmio.ko" -> "virtio_mmio"
    const std::string module = f.substr(f.find('-') + 1, f.rfind(".ko") - f.find('-') - 1);
    std::string params;
    std::istringstream words(cmdline);
    for (std::string w; words >> w;)
      if (w.rfind(module + ".", 0) == 0) params += w.substr(module.size() + 1) + " ";
    const int fd = open(("/modules/" + f).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || syscall(SYS_finit_module, fd, params.c_str(), 0) != 0) {
      if (errno != EEXIST) fail("loading module " + f);
    }
    close(fd);
  }
}

// The first entry of DIR whose name MATCHES, waiting up to 2 s for the kernel to make it.
std::string wait_for(const std::string& dir, const std::function<bool(const std::string&)>& matches,
                     const std::string& what) {
  for (int i = 0; i < 2000; ++i) {
    if (DIR* d = opendir(dir.c_str())) {
      std::string found;
      while (const dirent* e = readdir(d))
        if (found.empty() && matches(e->d_name)) found = dir + "/" + e->d_name;
      closedir(d);
      if (!found.empty()) return found;
    }
    usleep(1000);
  }
  errno = ENOENT;
  fail("waiting for " + what);
}

// The virtio serial port k3lab talks on: port 1 of the one virtio-serial device, /dev/vport<N>p1
// where N is the device's index among the guest's virtio devices.
std::string agent_port() {
  return wait_for(
      "/dev",
      [](const std::string& name) {
        return name.rfind("vport", 0) == 0 && name.size() > 7 &&
               name.substr(name.size() - 2) == "p1";
      },
      "the agent's virtio serial port /dev/vport*p1");
}

void must_mount(const char* src, const std::string& dst, const char* type, unsigned long flags,
                const std::string& data) {
  mkdir(dst.c_str(), 0755);
  if (mount(src, dst.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) != 0)
    fail(std::string("mounting ") + type + " at " + dst);
}

// The commands' cgroup (cgroup v2, mounted outside the root the commands see).
int g_cgroup_procs = -1, g_cgroup_pids_max = -1, g_cgroup_kill = -1, g_cgroup_events = -1;
int g_upper = -1;

// MemAvailable of /proc/meminfo, in bytes.
uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  for (std::string name; in >> name;) {
    uint64_t kib = 0;
    in >> kib;
    if (name == "MemAvailable:") return kib << 10;
    in.ignore(1 << 10, '\n');
  }
  errno = ENOENT;
  fail("reading MemAvailable in /proc/meminfo");
}

void write_control(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, text.data(), text.size()) != ssize_t(text.size()))
    fail("writing " + text + " to " + path);
  close(fd);
}

// The commands' memory limit is MEMORY_BYTES, and never so much that the agent and the kernel
// could not go on: under it a memory bomb meets the out-of-memory killer in the commands' cgroup
// at once, where a guest without swap would otherwise reclaim its programs' pages for minutes.
void make_command_cgroup(uint64_t memory_bytes) {
  must_mount("cgroup2", "/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  write_control("/cgroup/cgroup.subtree_control", "+pids +memory");
  if (mkdir("/cgroup/commands", 0755) != 0) fail("mkdir /cgroup/commands");
  constexpr uint64_t kAgentReserve = 16ull << 20;
  const uint64_t available = available_memory();
  const uint64_t most = available > 2 * kAgentReserve ? available - kAgentReserve : available / 2;
  write_control("/cgroup/commands/memory.max",
                std::to_string(memory_bytes ? std::min(memory_bytes, most) : most));
  g_cgroup_procs = open("/cgroup/commands/cgroup.procs", O_WRONLY | O_CLOEXEC);
  g_cgroup_pids_max = open("/cgroup/commands/pids.max", O_WRONLY | O_CLOEXEC);
  g_cgroup_kill = open("/cgroup/commands/cgroup.kill", O_WRONLY | O_CLOEXEC);
  g_cgroup_events = open("/cgroup/commands/cgroup.events", O_RDONLY | O_CLOEXEC);
  if (g_cgroup_procs < 0 || g_cgroup_pids_max < 0 || g_cgroup_kill < 0 || g_cgroup_events < 0)
    fail("opening the commands' cgroup");
}

}  // namespace

int writable_layer_fd() { return g_upper; }

void set_command_cgroup_limit(uint64_t processes) {
  if (g_cgroup_pids_max < 0) return;
  const std::string text = processes ? std::to_string(processes) : "max";
  [[maybe_unused]] ssize_t w = pwrite(g_cgroup_pids_max, text.data(), text.size(), 0);
}

int kill_command_cgroup() {
  if (g_cgroup_kill < 0) return -1;
  [[maybe_unused]] ssize_t w = pwrite(g_cgroup_kill, "1", 1, 0);
  char events[256];
  const ssize_t n = pread(g_cgroup_events, events, sizeof events - 1, 0);
  if (n <= 0) return 1;
  events[n] = '\0';
  return std::strstr(events, "populated 1") != nullptr;
}

void join_command_cgroup() {
  if (g_cgroup_procs < 0) return;
  char digits[24];
  int n = 0;
  for (pid_t p = getpid(); p > 0; p /= 10) digits[n++] = char('0' + p % 10);
  char pid[24];
  for (int i = 0; i < n; ++i) pid[i] = digits[n - 1 - i];
  [[maybe_unused]] ssize_t w = write(g_cgroup_procs, pid, size_t(n));
}

int guest_init() {
  must_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "");
  must_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  const std::string cmdline = kernel_cmdline();
  load_modules(cmdline);
  const int layers = std::stoi(cmdline_value(cmdline, "k3.layers", "0"));
  const bool host_system = cmdline_value(cmdline, "k3.host", "0") == "1";
  const std::string disk_bytes = cmdline_value(cmdline, "k3.disk", "268435456");

  // The image's layers, bottom first on vda, vdb, ...; overlay wants the top first.
  std::string lower;
  for (int i = 0; i < layers; ++i) {
    const std::string dev = std::string("/dev/vd") + char('a' + i),
                      dir = "/layers/" + std::to_string(i);
    wait_for(
        "/dev", [&](const std::string& name) { return "/dev/" + name == dev; }, dev);
    mkdir("/layers", 0755);
    must_mount(dev.c_str(), dir, "ext4", MS_RDONLY | MS_NOSUID | MS_NODEV, "");
    lower = dir + (lower.empty() ? "" : ":" + lower);
  }
  if (lower.empty()) {
    mkdir("/empty", 0755);
    lower = "/empty";
  }
  must_mount("rw", "/rw", "tmpfs", MS_NOSUID | MS_NODEV, "size=" + disk_bytes + ",mode=0755");
  mkdir("/rw/upper", 0755);
  mkdir("/rw/work", 0755);
  g_upper = open("/rw/upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g_upper < 0) fail("opening /rw/upper");
  must_mount("overlay", "/newroot", "overlay", MS_NOSUID | MS_NODEV,
             "lowerdir=" + lower + ",upperdir=/rw/upper,workdir=/rw/work");
  if (host_system) {
    must_mount("usr", "/newroot/usr", "9p", MS_RDONLY | MS_NOSUID | MS_NODEV,
               "trans=virtio,version=9p2000.L,cache=loose");
    for (const char* link : {"bin", "sbin", "lib", "lib64"}) {
      struct stat st {};
      if (lstat((std::string("/newroot/") + link).c_str(), &st) != 0)
        symlink((std::string("usr/") + link).c_str(), (std::string("/newroot/") + link).c_str());
    }
  }
  mkdir("/newroot/tmp", 01777);
  chmod("/newroot/tmp", 01777);
  must_mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  must_mount("devtmpfs", "/newroot/dev", "devtmpfs", MS_NOSUID, "");

  make_command_cgroup(std::stoull(cmdline_value(cmdline, "k3.memory", "0")));
  const std::string port = agent_port();
  const int channel = open(port.c_str(), O_RDWR | O_CLOEXEC);
  if (channel < 0) fail("opening " + port);
  if (chdir("/newroot") != 0 || chroot(".") != 0 || chdir("/") != 0) fail("entering the root");
  return channel;
}

}  // namespace k3::sandbox::agent
