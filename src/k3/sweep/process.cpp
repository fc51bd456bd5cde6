#include "k3/sweep/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "k3/base/error.h"

namespace k3::sweep {

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  K3_CHECK(pid >= 0, "fork failed: ", std::strerror(errno));
  if (pid > 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the sweep died before prctl took effect
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || null < 0) _exit(127);
  dup2(null, 0);
  dup2(fd, 1);
  dup2(fd, 2);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

std::string last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  const size_t nl = tail.find_last_of("\n\r");
  return nl == std::string::npos ? tail : tail.substr(nl + 1);
}

int64_t steps_recorded(const std::string& run_dir) {
  const std::string line = last_line(run_dir + "/metrics.jsonl");
  const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("step") && j.at("step").is_number()
             ? j.at("step").get<int64_t>()
             : 0;
}

}  // namespace k3::sweep
