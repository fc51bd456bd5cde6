// A per-component time breakdown (`k3lab train --profile`): named buckets of wall time, filled by
// scoped timers that cost one branch when profiling is off.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "k3/base/timer.h"

namespace k3 {

class Profile {
 public:
  static void enable(bool on);
  static bool enabled();
  static void add(const std::string& bucket, double seconds);
  static void reset();
  // Buckets by descending time.
  static std::vector<std::pair<std::string, double>> totals();
};

// Adds the scope's wall time to `bucket` when profiling is on.
class ProfileScope {
 public:
  // A null bucket times nothing.
  explicit ProfileScope(const char* bucket)
      : bucket_(bucket && Profile::enabled() ? bucket : nullptr) {}
  ~ProfileScope() { stop(); }
  // Ends the scope's time here rather than at its end.
  void stop() {
    if (bucket_) Profile::add(bucket_, timer_.seconds());
    bucket_ = nullptr;
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  const char* bucket_;
  Timer timer_;
};

}  // namespace k3
