// A graceful stop on request: SIGINT, SIGTERM and SIGUSR1 (which Slurm sends ahead of a time
// limit) set a flag that a long loop polls at a safe point; a second such signal ends the process
// at once with the signal's default action.
//
// The signals are taken by one watcher thread (sigwait), never by a handler on a compute thread:
// some JIT-compiled GEMM kernels (oneDNN's AVX-512 f32 GEMM before 3.11) point the stack pointer
// into a heap buffer while they run, so a signal frame pushed there overwrites the heap. Call
// route_stop_signals() first in main(), before any thread starts: every thread started afterwards
// inherits the blocked mask. A child process that should see these signals must unblock them
// before exec.
#pragma once

#include <functional>

namespace k3 {

// Blocks the stop signals in the calling thread and starts the watcher. Without a StopSignals
// alive, a stop signal has its default effect (ends the process; ignored if it was ignored when
// this was called). Idempotent.
void route_stop_signals();

class StopSignals {
 public:
  StopSignals();   // listens for stop requests (one instance at a time; routes if not yet done)
  ~StopSignals();  // stops listening: stop signals have their default effect again
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received (e.g. SIGTERM), or 0.
  int requested() const;
};

// While alive, the watcher runs NOTE as soon as a StopSignals records a request: for what
// cannot wait for the main thread's next poll, which a rank blocked for good in a collective never
// reaches. NOTE runs on the watcher thread. One at a time.
class StopNote {
 public:
  explicit StopNote(std::function<void()> note);
  ~StopNote();
  StopNote(const StopNote&) = delete;
  StopNote& operator=(const StopNote&) = delete;
};

// "SIGTERM" for SIGTERM, ...
const char* signal_name(int signal);

}  // namespace k3
