#include "k3/sandbox/seccomp_policy.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace k3::sandbox {

const std::vector<std::string>& denied_syscalls() {
  static const std::vector<std::string> names = {
      // other processes' memory and execution
      "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
      // file systems and namespaces
      "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
      "fsmount", "fspick", "mount_setattr", "unshare", "setns", "clone3", "open_by_handle_at",
      "name_to_handle_at", "quotactl", "quotactl_fd",
      // the kernel itself
      "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
      "swapon", "swapoff", "syslog", "acct", "bpf", "perf_event_open", "userfaultfd",
      "io_uring_setup", "io_uring_enter", "io_uring_register", "personality", "uselib",
      "lookup_dcookie", "vhangup", "iopl", "ioperm", "nfsservctl",
      // keys and clocks shared with the host
      "keyctl", "add_key", "request_key", "settimeofday", "clock_settime", "clock_adjtime",
      "adjtimex", "sethostname", "setdomainname",
      // POSIX message queues outlive their processes and cannot be listed from inside: a reused
      // sandbox's next user would find them
      "mq_open"};
  return names;
}

std::string compile_seccomp_filter(std::vector<sock_filter>& program) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return "seccomp_init failed";
  auto fail = [&](const std::string& what, int rc) {
    seccomp_release(ctx);
    return what + ": " + std::strerror(-rc);
  };
  for (const auto& name : denied_syscalls()) {
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    // clone3 gets ENOSYS so that the C library falls back to clone, whose flags are checked below.
    const uint32_t action = name == "clone3" ? SCMP_ACT_ERRNO(ENOSYS) : SCMP_ACT_ERRNO(EPERM);
    if (const int rc = seccomp_rule_add(ctx, action, nr, 0); rc < 0)
      return fail("deny " + name, rc);
  }
  // clone may create threads and processes, not namespaces.
  const uint64_t ns_flags = CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                            CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
  for (uint64_t flag = 1; flag != 0; flag <<= 1) {
    if (!(ns_flags & flag)) continue;
    const int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                    SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
    if (rc < 0) return fail("deny clone flags", rc);
  }
  // libseccomp (2.5) exports to a file descriptor only: through a memory file.
  const int fd = memfd_create("k3lab-seccomp", MFD_CLOEXEC);
  if (fd < 0) return fail("memfd_create", -errno);
  if (const int rc = seccomp_export_bpf(ctx, fd); rc < 0) {
    close(fd);
    return fail("seccomp_export_bpf", rc);
  }
  seccomp_release(ctx);
  const std::string why = read_seccomp_program(fd, program);
  close(fd);
  return why.empty() ? "" : "seccomp_export_bpf: " + why;
}

std::string read_seccomp_program(int fd, std::vector<sock_filter>& program) {
  std::string bytes;
  char buf[4096];
  for (ssize_t n; (n = pread(fd, buf, sizeof buf, off_t(bytes.size()))) > 0;)
    bytes.append(buf, size_t(n));
  if (bytes.empty() || bytes.size() % sizeof(sock_filter) != 0) return "no program";
  program.resize(bytes.size() / sizeof(sock_filter));
  std::memcpy(program.data(), bytes.data(), bytes.size());
  return "";
}

int seccomp_program_fd(const std::vector<sock_filter>& program) {
  const int fd = memfd_create("k3lab-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  const size_t size = program.size() * sizeof(sock_filter);
  if (program.empty() || write(fd, program.data(), size) != ssize_t(size) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int install_seccomp_program(const std::vector<sock_filter>& program) {
  if (program.empty()) return EINVAL;
  const sock_fprog prog{static_cast<unsigned short>(program.size()),
                        const_cast<sock_filter*>(program.data())};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return errno;
  return 0;
}

}  // namespace k3::sandbox
