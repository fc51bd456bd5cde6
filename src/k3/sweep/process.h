// The processes a sweep starts (its jobs and the probes that choose its split): each one
// `k3lab` with its output appended to a log, killed if the sweep dies, watched through its files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace k3::sweep {

// A child running ARGS (ARGS[0] the binary) with stdout and stderr appended to LOG.
pid_t spawn(const std::vector<std::string>& args, const std::string& log);

std::string last_line(const std::string& path);      // its last non-empty line (of its tail), or ""
int64_t steps_recorded(const std::string& run_dir);  // the step of its newest metrics record, or 0

}  // namespace k3::sweep
