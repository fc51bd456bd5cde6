// Resident memory of this process, from /proc/self/status, for benches that report what a phase
// holds: VmRSS (now) or VmHWM (the peak since the last reset_resident_peak()).
#pragma once

#include <cstddef>
#include <fstream>
#include <string>

namespace k3::bench {

// The field in bytes; 0 when /proc/self/status has no such field.
inline size_t status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  const std::string prefix = std::string(field) + ":";
  for (std::string line; std::getline(f, line);)
    if (line.starts_with(prefix)) return std::stoull(line.substr(prefix.size())) * 1024;
  return 0;
}

// Resets VmHWM to the current VmRSS; false where the kernel does not allow it.
inline bool reset_resident_peak() {
  return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
}

}  // namespace k3::bench
