// The one threading policy: OpenMP for k3lab's own loops, and oneDNN runs on the same OpenMP
// runtime (Debian builds it with libgomp). A kernel either calls oneDNN from the serial region
// (oneDNN then uses every thread) or calls it inside its own parallel loop (oneDNN then runs
// single-threaded in each thread): never both, so threads are never oversubscribed.
#pragma once

#include <cstdint>

namespace k3 {

// Set the number of threads for k3lab and oneDNN. n <= 0 means: K3_THREADS, else OMP_NUM_THREADS,
// else the number of cores; a count from the environment is capped as by user_thread_count.
// An explicit n is taken as it is (tests run more threads than cores on purpose).
void set_num_threads(int n = 0);
int num_threads();

int num_cores();  // this process's share of the machine's cores; at least 1
// Several processes of one job on this machine: each counts cores / processes as its own.
void share_cores(int processes_on_machine);
// A thread count a user asked for through SETTING (e.g. "train.threads"): more threads than cores
// only slow every loop down, so the count is capped to the cores with a warning on stderr.
int user_thread_count(int64_t requested, const char* setting);

// libgomp reads its wait policy once, at load, and by default its idle threads spin: on cores
// shared with other processes a spinning thread starves the one with the work (many small
// parallel regions, as in decoding, measured 10-30x slower on a loaded 2-core host). Unless
// OMP_WAIT_POLICY is set, restarts this program (argv as given to main) with the passive policy;
// returns only when the policy is already chosen or the restart fails.
void restart_with_passive_omp_wait(char** argv);

}  // namespace k3
