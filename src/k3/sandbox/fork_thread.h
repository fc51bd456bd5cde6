// Forks from one long-lived thread. A child that asks to die with its parent (bubblewrap's
// --die-with-parent, PR_SET_PDEATHSIG) dies when the *thread* that forked it exits, so sandboxes
// started from short-lived threads (a request handler, a test's helper) would vanish with them.
// Every sandbox is forked here instead, and they all end when this thread does.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace k3::sandbox {

class ForkThread {
 public:
  ForkThread();
  ~ForkThread();
  ForkThread(const ForkThread&) = delete;
  ForkThread& operator=(const ForkThread&) = delete;

  // Starts a child process from the thread; the child runs CHILD (which must exec or _exit). The
  // child shares this process's memory until then (vfork): CHILD may make plain system calls only
  // (no allocation, no C library call that takes a lock or signals other threads, such as glibc's
  // setuid family). Returns the child's pid, or -1 with errno.
  pid_t fork(const std::function<void()>& child);

 private:
  struct Job {
    const std::function<void()>* child;
    std::promise<std::pair<pid_t, int>> done;
  };
  void run();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job*> jobs_;
  bool stopping_ = false;
  std::vector<char> stack_ = std::vector<char>(256 << 10);  // the child's, until it execs
  std::thread thread_;
};

}  // namespace k3::sandbox
