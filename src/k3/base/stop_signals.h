// A graceful stop on request: SIGINT, SIGTERM and SIGUSR1 (which Slurm sends ahead of a time
// limit) set a flag that a long loop polls at a safe point; a second such signal ends the process
// at once with the signal's default action.
#pragma once

namespace k3 {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (one instance at a time)
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received (e.g. SIGTERM), or 0.
  int requested() const;
};

// "SIGTERM" for SIGTERM, ...
const char* signal_name(int signal);

}  // namespace k3
