#include "k3/sandbox/seccomp_policy.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/prctl.h>

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
      "adjtimex", "sethostname", "setdomainname"};
  return names;
}

std::string install_seccomp_filter() {
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
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    seccomp_release(ctx);
    return std::string("no_new_privs: ") + std::strerror(errno);
  }
  if (const int rc = seccomp_load(ctx); rc < 0) return fail("seccomp_load", rc);
  seccomp_release(ctx);
  return "";
}

}  // namespace k3::sandbox
