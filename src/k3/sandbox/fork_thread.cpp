#include "k3/sandbox/fork_thread.h"

#include <unistd.h>

#include <cerrno>

namespace k3::sandbox {

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
    const pid_t pid = ::fork();
    if (pid == 0) {
      (*job->child)();
      _exit(127);
    }
    job->done.set_value({pid, pid < 0 ? errno : 0});
    lock.lock();
  }
}

}  // namespace k3::sandbox
