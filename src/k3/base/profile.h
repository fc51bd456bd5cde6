// A per-component time breakdown (`k3lab train --profile`): named buckets of wall time, filled by
// scoped timers that cost one branch when profiling is off. Buckets nest as their scopes do on a
// thread: a bucket opened while another is open is its child ("gemm" within "kda" within "step"),
// so the profile is a tree whose children's time never exceeds their parent's.
#pragma once

#include <string>
#include <vector>

#include "k3/base/timer.h"

namespace k3 {

struct ProfileNode {
  std::string name;
  double seconds = 0;                 // wall time of the bucket's scopes
  std::vector<ProfileNode> children;  // by descending time
  // Time within the bucket outside every child (never negative but for clock rounding).
  double own_seconds() const;
};

class Profile {
 public:
  static void enable(bool on);
  static bool enabled();
  static void reset();
  // Every bucket: the root's children are those opened outside any other, the root's time their
  // sum.
  static ProfileNode tree();
};

// The tree as indented lines "  name  seconds s  percent%" (percent of WHOLE seconds), each
// bucket with children followed by an "other" line for its own time.
std::string format_profile(const ProfileNode& root, double whole, double per = 1);

// Adds the scope's wall time to `bucket`, within the buckets open around it, when profiling is on.
class ProfileScope {
 public:
  // A null bucket times nothing.
  explicit ProfileScope(const char* bucket)
      : bucket_(bucket && Profile::enabled() ? bucket : nullptr) {
    if (bucket_) open();
  }
  ~ProfileScope() { stop(); }
  // Ends the scope's time here rather than at its end.
  void stop() {
    if (bucket_) close();
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  void open();   // the bucket becomes the innermost one open on this thread
  void close();  // adds the time to the bucket within the ones open around it

  const char* bucket_;
  Timer timer_;
};

}  // namespace k3
