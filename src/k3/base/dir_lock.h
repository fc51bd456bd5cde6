// One owner per directory: an advisory lock (flock) on DIR/.lock, held for the owner's lifetime.
// The kernel releases it when the process dies, however it dies, so a killed owner leaves
// nothing to clean up; the file only records who holds it, for the refusal message.
#pragma once

#include <string>

namespace k3 {

class DirLock {
 public:
  // Takes the lock at once or throws a k3::Error naming DIR and the process holding it.
  // WHAT describes the owner ("k3lab train") in the file for others to read.
  DirLock(const std::string& dir, const std::string& what);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace k3
