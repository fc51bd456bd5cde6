#include "k3/base/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "k3/base/error.h"
#include "k3/base/log.h"

namespace k3 {
namespace {

std::string read_all(int fd) {
  std::string text;
  char buf[256];
  ssize_t n;
  while ((n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0)
    text.append(buf, n);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  K3_CHECK_CTX(fd_ >= 0, (ErrorContext{path, "", -1}),
               "cannot open the lock file: ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = err == EWOULDBLOCK ? read_all(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    K3_CHECK_CTX(err != EWOULDBLOCK, (ErrorContext{dir, "", -1}), "in use by ",
                 holder.empty() ? std::string("another process") : holder,
                 ": one process at a time may own a run directory");
    throw Error(std::string("cannot lock: ") + std::strerror(err), ErrorContext{path, "", -1});
  }
  const std::string owner = "process " + std::to_string(::getpid()) + " (" + what + ")\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, owner.data(), owner.size(), 0) < 0)
    log_warn("holding ", path, " but cannot record the owner in it: ", std::strerror(errno));
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace k3
