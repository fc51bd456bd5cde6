// The system calls a sandboxed command may not make (docs/sandbox.md lists them with the why).
// The filter is compiled once (by k3lab for every namespaces sandbox, by the agent in a microVM),
// and the agent installs the compiled program in each command's process just before exec; every
// denied call fails with EPERM, and any other architecture's calls (32-bit int 0x80, x32) kill
// the process.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

namespace k3::sandbox {

// The names of the denied calls, as libseccomp knows them.
const std::vector<std::string>& denied_syscalls();

// Compiles the filter (libseccomp) into PROGRAM. Returns "" or the reason it failed.
std::string compile_seccomp_filter(std::vector<sock_filter>& program);

// PROGRAM in a sealed memory file (its contents fixed for good), for a child to inherit: compiled
// once by k3lab, read by every sandbox's agent. Returns the descriptor (close-on-exec), or -1.
int seccomp_program_fd(const std::vector<sock_filter>& program);
// Reads a program that seccomp_program_fd wrote. Returns "" or the reason it could not.
std::string read_seccomp_program(int fd, std::vector<sock_filter>& program);

// Installs PROGRAM on the calling thread after PR_SET_NO_NEW_PRIVS. Plain system calls only, so a
// child that shares its parent's memory (vfork) may call it. Returns 0 or the errno of the
// failure (the caller must then not run the command).
int install_seccomp_program(const std::vector<sock_filter>& program);

}  // namespace k3::sandbox
