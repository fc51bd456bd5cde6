#include "inherited.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <iterator>

namespace k3::sandbox::agent {
namespace {

// <linux/ioprio.h>'s IOPRIO_WHO_PROCESS (the ABI value). The header itself is not C++ since
// linux-libc-dev 6.1.192 (a function parameter named `class`), so it is not included.
constexpr int kIoprioWhoProcess = 1;

// The kernel's struct sched_attr (its first version), and the flag that sets its utilization hints;
// <linux/sched/types.h> clashes with the C library's <sched.h>, which wraps neither call.
struct sched_attr {
  uint32_t size, sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime, sched_deadline, sched_period;
  uint32_t sched_util_min, sched_util_max;
};
constexpr uint64_t SCHED_FLAG_UTIL_CLAMP = 0x20 | 0x40;  // ..._MIN | ..._MAX

int get_sched_attr(sched_attr& attr) {
  std::memset(&attr, 0, sizeof attr);
  return int(syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0));
}

int set_sched_attr(sched_attr attr) {
  attr.size = sizeof attr;
  attr.sched_flags |= SCHED_FLAG_UTIL_CLAMP;  // the utilization hints too, where they exist
  if (syscall(SYS_sched_setattr, 0, &attr, 0) == 0) return 0;
  attr.sched_flags &= ~uint64_t(SCHED_FLAG_UTIL_CLAMP);
  return int(syscall(SYS_sched_setattr, 0, &attr, 0));
}

int get_ioprio() { return int(syscall(SYS_ioprio_get, kIoprioWhoProcess, 0)); }

struct Settings {
  rlimit limits[RLIM_NLIMITS];
  sched_attr sched;
  cpu_set_t cpus;
  int ioprio;
};

Settings read_settings() {
  Settings s;
  std::memset(&s, 0, sizeof s);
  for (int r = 0; r < RLIM_NLIMITS; ++r) getrlimit(__rlimit_resource(r), &s.limits[r]);
  get_sched_attr(s.sched);
  sched_getaffinity(0, sizeof s.cpus, &s.cpus);
  s.ioprio = get_ioprio();
  return s;
}

Settings g_fresh;

const char* const kLimitNames[] = {
    "RLIMIT_CPU",      "RLIMIT_FSIZE", "RLIMIT_DATA",   "RLIMIT_STACK",
    "RLIMIT_CORE",     "RLIMIT_RSS",   "RLIMIT_NPROC",  "RLIMIT_NOFILE",
    "RLIMIT_MEMLOCK",  "RLIMIT_AS",    "RLIMIT_LOCKS",  "RLIMIT_SIGPENDING",
    "RLIMIT_MSGQUEUE", "RLIMIT_NICE",  "RLIMIT_RTPRIO", "RLIMIT_RTTIME"};
static_assert(std::size(kLimitNames) == RLIM_NLIMITS, "a name for each rlimit");

}  // namespace

void remember_inherited_settings() { g_fresh = read_settings(); }

void apply_remembered_settings() {
  for (int r = 0; r < RLIM_NLIMITS; ++r) setrlimit(__rlimit_resource(r), &g_fresh.limits[r]);
  set_sched_attr(g_fresh.sched);
  sched_setaffinity(0, sizeof g_fresh.cpus, &g_fresh.cpus);
  syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, g_fresh.ioprio);
}

std::string restore_inherited_settings() {
  apply_remembered_settings();
  const Settings now = read_settings();
  for (int r = 0; r < RLIM_NLIMITS; ++r) {
    if (now.limits[r].rlim_cur != g_fresh.limits[r].rlim_cur ||
        now.limits[r].rlim_max != g_fresh.limits[r].rlim_max)
      return std::string("the agent's ") + kLimitNames[r] + " cannot be restored";
  }
  if (std::memcmp(&now.sched, &g_fresh.sched, sizeof now.sched) != 0)
    return "the agent's scheduling policy, priority or nice value cannot be restored";
  if (!CPU_EQUAL(&now.cpus, &g_fresh.cpus)) return "the agent's CPU affinity cannot be restored";
  if (now.ioprio != g_fresh.ioprio) return "the agent's I/O priority cannot be restored";
  return "";
}

}  // namespace k3::sandbox::agent
