#include "run_command.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "guest_init.h"
#include "inherited.h"
#include "k3/sandbox/seccomp_policy.h"

namespace k3::sandbox::agent {
namespace {

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

void set_limit(int resource, uint64_t value) {
  if (value == 0) return;
  rlimit r{rlim_t(value), rlim_t(value)};
  setrlimit(resource, &r);
}

// The filter every command gets, compiled once (prepare_commands).
std::vector<sock_filter> g_filter;
std::string g_filter_error = "the agent has not compiled its seccomp filter";

// What the command's child needs, all of it made before the child exists: the child shares the
// agent's memory until it execs (clone with CLONE_VM | CLONE_VFORK, much cheaper than fork), so it
// may make system calls only, and allocate nothing.
struct ChildPlan {
  const wire::ExecRequest* request;
  std::vector<std::string> candidates;  // the program's paths to try, in $PATH order
  std::vector<char*> argv, envp;
  int in, out, err, status_fd;
};

// In the child: why it could not run the command, as text on the status pipe, then exit 127.
[[noreturn]] void child_failed(int status_fd, const char* what, const char* detail, int error) {
  for (const char* part : {what, detail, ": ", static_cast<const char*>(strerror(error))}) {
    [[maybe_unused]] ssize_t w = write(status_fd, part, strlen(part));
  }
  _exit(127);
}

int exec_child(void* arg) {
  const ChildPlan& p = *static_cast<const ChildPlan*>(arg);
  const wire::ExecRequest& q = *p.request;
  setpgid(0, 0);
  join_command_cgroup();
  if (dup2(p.in, 0) < 0 || dup2(p.out, 1) < 0 || dup2(p.err, 2) < 0)
    child_failed(p.status_fd, "dup2", "", errno);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);  // the agent ignores it; an ignored signal would stay so across exec
  if (chdir(q.cwd.c_str()) != 0) child_failed(p.status_fd, "cwd ", q.cwd.c_str(), errno);
  apply_remembered_settings();  // not what an earlier command may have set on the agent
  set_limit(RLIMIT_AS, q.rlimits.address_space_bytes);
  set_limit(RLIMIT_NPROC, q.rlimits.processes);
  set_limit(RLIMIT_CPU, q.rlimits.cpu_seconds);
  set_limit(RLIMIT_FSIZE, q.rlimits.file_size_bytes);
  set_limit(RLIMIT_NOFILE, q.rlimits.open_files);
  set_limit(RLIMIT_CORE, 1);  // no core files (0 means "not set" on the wire)
  if (const int error = install_seccomp_program(g_filter); error != 0)
    child_failed(p.status_fd, "seccomp", "", error);
  // As execvpe would: the first candidate that exists; a missing one lets the search go on.
  int error = ENOENT;
  for (const auto& path : p.candidates) {
    execve(path.c_str(), p.argv.data(), p.envp.data());
    if (errno != ENOENT && errno != ENOTDIR) error = errno;
    if (errno != ENOENT && errno != ENOTDIR && errno != EACCES) break;
  }
  child_failed(p.status_fd, q.argv[0].c_str(), "", error);
}

// The paths to try for PROGRAM: itself if it names a directory, else each directory of PATH.
std::vector<std::string> program_candidates(const std::string& program,
                                            const std::vector<std::string>& env) {
  if (program.find('/') != std::string::npos) return {program};
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env)
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  std::vector<std::string> out;
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > start ? path.substr(start, end - start) : ".";
    out.push_back(dir + "/" + program);
    start = end + 1;
  }
  return out;
}

// Appends what FD has to OUT up to CAP bytes (the rest is read and dropped). False at end of file.
bool drain(int fd, std::string& out, uint64_t cap, bool& truncated) {
  char buf[65536];
  const ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  const uint64_t room = cap > out.size() ? cap - out.size() : 0;
  out.append(buf, size_t(std::min<uint64_t>(room, uint64_t(n))));
  if (uint64_t(n) > room) truncated = true;
  return true;
}

void reap_children() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace

void prepare_commands(int filter_fd) {
  if (filter_fd >= 0) {
    const std::string why = read_seccomp_program(filter_fd, g_filter);
    close(filter_fd);  // nothing a command runs sees it
    if (why.empty()) return;
    g_filter.clear();
  }
  g_filter_error = compile_seccomp_filter(g_filter);
}

void kill_all_others() {
  // kill(-1) reaches every process of this PID namespace but PID 1 and the caller. A fork bomb can
  // add processes while it runs, so repeat until none answers. A microVM's agent is the whole
  // kernel's PID 1, where kill(-1) also reaches the kernel's threads, which answer and never go:
  // there the commands' cgroup says when they are all gone.
  for (int round = 0; round < 2000; ++round) {
    kill(-1, SIGKILL);
    const int in_cgroup = kill_command_cgroup();
    reap_children();
    if (in_cgroup >= 0 ? in_cgroup == 0 : kill(-1, 0) != 0 && errno == ESRCH) return;
    usleep(round < 10 ? 100 : 1000);
  }
}

wire::ExecResult run_command(const wire::ExecRequest& q) {
  wire::ExecResult r;
  if (q.argv.empty()) {
    r.exit_code = 127;
    r.error = "empty command";
    return r;
  }
  int in[2], out[2], err[2], status_pipe[2];
  if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) ||
      pipe2(status_pipe, O_CLOEXEC)) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  set_command_cgroup_limit(q.rlimits.processes);
  static const std::vector<std::string> default_env = {
      "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/tmp", "LANG=C.UTF-8"};
  ChildPlan plan{&q, {}, {}, {}, in[0], out[1], err[1], status_pipe[1]};
  const auto& env = q.env.empty() ? default_env : q.env;
  plan.candidates = program_candidates(q.argv[0], env);
  for (const auto& a : q.argv) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  for (const auto& e : env) plan.envp.push_back(const_cast<char*>(e.c_str()));
  plan.envp.push_back(nullptr);
  // The child's stack; the agent waits (CLONE_VFORK) until the child has exec'd or exited.
  static std::vector<char> child_stack(256 << 10);
  const int64_t start = now_ms();
  const pid_t pid = g_filter.empty() ? (errno = EINVAL, -1)
                                     : clone(exec_child, child_stack.data() + child_stack.size(),
                                             CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  close(status_pipe[1]);
  if (pid < 0) {
    r.error = g_filter.empty() ? "seccomp: " + g_filter_error
                               : std::string("clone: ") + std::strerror(errno);
    for (int fd : {in[1], out[0], err[0], status_pipe[0]}) close(fd);
    return r;
  }
  const int pidfd = int(syscall(SYS_pidfd_open, pid, 0));
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  int stdin_fd = in[1];
  size_t stdin_sent = 0;
  if (q.stdin_data.empty()) {
    close(stdin_fd);
    stdin_fd = -1;
  }
  bool out_open = true, err_open = true, exited = false;
  int status = 0;
  while (out_open || err_open || !exited) {
    const int64_t left = int64_t(q.timeout_ms) - (now_ms() - start);
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd p[4];
    int n = 0;
    const int i_out = out_open ? n : -1;
    if (out_open) p[n++] = {out[0], POLLIN, 0};
    const int i_err = err_open ? n : -1;
    if (err_open) p[n++] = {err[0], POLLIN, 0};
    const int i_in = stdin_fd >= 0 ? n : -1;
    if (stdin_fd >= 0) p[n++] = {stdin_fd, POLLOUT, 0};
    const int i_pid = !exited && pidfd >= 0 ? n : -1;
    if (i_pid >= 0) p[n++] = {pidfd, POLLIN, 0};
    const int ready = poll(p, nfds_t(n), pidfd >= 0 ? int(std::min<int64_t>(left, 1000)) : 10);
    if (ready < 0 && errno != EINTR) break;
    if (i_out >= 0 && p[i_out].revents)
      out_open = drain(out[0], r.stdout_data, q.output_cap_bytes, r.stdout_truncated);
    if (i_err >= 0 && p[i_err].revents)
      err_open = drain(err[0], r.stderr_data, q.output_cap_bytes, r.stderr_truncated);
    if (i_in >= 0 && p[i_in].revents) {
      const ssize_t w =
          write(stdin_fd, q.stdin_data.data() + stdin_sent, q.stdin_data.size() - stdin_sent);
      if (w > 0) stdin_sent += size_t(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || stdin_sent == q.stdin_data.size()) {
        close(stdin_fd);
        stdin_fd = -1;
      }
    }
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      kill_all_others();  // what it left behind; their ends of the pipes close with them
    }
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);  // before kill_all_others reaps it without its status
    kill_all_others();
  }
  r.wall_ms = uint64_t(now_ms() - start);
  if (stdin_fd >= 0) close(stdin_fd);
  if (pidfd >= 0) close(pidfd);
  char why[512];
  const ssize_t n_why = read(status_pipe[0], why, sizeof why);
  for (int fd : {out[0], err[0], status_pipe[0]}) close(fd);
  if (n_why > 0) r.error.assign(why, size_t(n_why));
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = -1;
    r.signal = WTERMSIG(status);
  }
  return r;
}

}  // namespace k3::sandbox::agent
