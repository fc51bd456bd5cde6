#include "k3/sandbox/leftovers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "k3/base/error.h"
#include "k3/sandbox/cgroups.h"

namespace k3::sandbox {

size_t remove_leftovers(const ImageStore& store) {
  // A sandbox's cgroups are named after its id (the backends' "k3lab-" + id).
  return store.remove_abandoned_runs(
      [](const std::string& id) { remove_cgroups_named("k3lab-" + id); });
}

void start_guardian(const std::string& root) {
  int ends[2];
  K3_CHECK(pipe2(ends, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    ::close(ends[0]);
    ::close(ends[1]);
    throw Error(std::string("cannot fork the sandbox guardian: ") + std::strerror(e));
  }
  if (pid > 0) {  // this process holds the write end until it ends; the kernel closes it then
    ::close(ends[0]);
    return;
  }
  ::close(ends[1]);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(s, SIG_IGN);
  prctl(PR_SET_NAME, "k3lab-guardian");
  // Neither a terminal's nor a pipe's reader waits on the guardian's standard streams.
  if (const int null = ::open("/dev/null", O_RDWR); null >= 0)
    for (int fd : {0, 1, 2}) dup2(null, fd);
  char byte;
  ssize_t n;
  do n = ::read(ends[0], &byte, 1);  // end of file: the write end closed with this process
  while (n > 0 || (n < 0 && errno == EINTR));
  int status = 0;
  try {
    remove_leftovers(ImageStore(root));
  } catch (...) {
    status = 1;
  }
  _exit(status);
}

}  // namespace k3::sandbox
