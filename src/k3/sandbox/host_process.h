// Host programs the sandbox layer runs (tar, cp, bwrap, qemu): started without a shell.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace k3::sandbox {

// Runs ARGV to completion (its stdout discarded); throws an Error with its first stderr line if
// it fails.
void run_program(const std::vector<std::string>& argv);

// The path of PROGRAM found on $PATH, or "" when there is none.
std::string find_program(const std::string& program);

// SIGKILLs PID (if still there) and reaps it.
void kill_and_reap(pid_t pid);

}  // namespace k3::sandbox
