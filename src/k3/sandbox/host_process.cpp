#include "k3/sandbox/host_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "k3/base/error.h"

namespace k3::sandbox {

void run_program(const std::vector<std::string>& argv) {
  K3_CHECK(!argv.empty(), "run_program: empty command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int err[2];
  K3_CHECK(pipe2(err, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);  // chatty tools (mkfs) print progress there
    dup2(err[1], 2);
    execvp(args[0], args.data());
    const std::string text = argv[0] + ": " + std::strerror(errno) + "\n";
    [[maybe_unused]] ssize_t w = write(2, text.data(), text.size());
    _exit(127);
  }
  close(err[1]);
  if (pid < 0) {
    close(err[0]);
    throw Error(std::string("fork: ") + std::strerror(errno));
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(err[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (text.size() < 65536) text.append(buf, size_t(n));
  }
  close(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string first = text.substr(0, text.find('\n'));
    throw Error(argv[0] + " failed" + (first.empty() ? "" : ": " + first));
  }
}

std::string find_program(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

void kill_and_reap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace k3::sandbox
