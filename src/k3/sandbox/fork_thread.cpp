#include "k3/sandbox/fork_thread.h"

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace k3::sandbox {

namespace {
int run_child(void* child) {
  (*static_cast<const std::function<void()>*>(child))();
  _exit(127);
}
}  // namespace

ForkThread::ForkThread() : thread_([this] { run(); }) {}

ForkThread::~ForkThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

pid_t ForkThread::fork(const std::function<void()>& child) {
  Job job{&child, {}};
  auto result = job.done.get_future();
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(&job);
  }
  wake_.notify_all();
  const auto [pid, error] = result.get();
  errno = error;
  return pid;
}

void ForkThread::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left to start
    Job* job = jobs_.front();
    jobs_.pop_front();
    lock.unlock();
    // The child borrows this process's memory until it execs (no copy of a large process's page
    // tables, as fork would make), and this thread waits until then.
    const pid_t pid =
        clone(run_child, stack_.data() + stack_.size(), CLONE_VM | CLONE_VFORK | SIGCHLD,
              const_cast<std::function<void()>*>(job->child));
    job->done.set_value({pid, pid < 0 ? errno : 0});
    lock.lock();
  }
}

}  // namespace k3::sandbox
