#include "k3/base/threads.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "k3/base/log.h"

namespace k3 {

namespace {
int sharing_processes = 1;
}

void share_cores(int processes_on_machine) { sharing_processes = std::max(1, processes_on_machine); }

int num_cores() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / sharing_processes);
}

int user_thread_count(int64_t requested, const char* setting) {
  const int cores = num_cores();
  if (requested <= cores) return static_cast<int>(requested);
  log_warn(setting, " = ", requested, " exceeds the ", cores, " cores of this machine: using ",
           cores, " threads");
  return cores;
}

void set_num_threads(int n) {
  for (const char* setting : {"K3_THREADS", "OMP_NUM_THREADS"}) {
    const char* e = n <= 0 ? std::getenv(setting) : nullptr;
    if (e) n = user_thread_count(std::atoll(e), setting);
  }
  if (n <= 0) n = num_cores();
  omp_set_num_threads(n);
  omp_set_max_active_levels(1);  // nested regions run serially: no oversubscription
}

int num_threads() { return omp_get_max_threads(); }

void restart_with_passive_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);
}

}  // namespace k3
