// The system calls a sandboxed command may not make (docs/sandbox.md lists them with the why).
// The agent installs the filter in each command's process just before exec; every denied call
// fails with EPERM, and any other architecture's calls (32-bit int 0x80, x32) kill the process.
#pragma once

#include <string>
#include <vector>

namespace k3::sandbox {

// The names of the denied calls, as libseccomp knows them.
const std::vector<std::string>& denied_syscalls();

// Installs the filter on the calling thread (after PR_SET_NO_NEW_PRIVS). Returns "" or the reason
// it failed (the caller must then not run the command).
std::string install_seccomp_filter();

}  // namespace k3::sandbox
