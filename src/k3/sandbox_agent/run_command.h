// Runs one command inside the sandbox for the agent: its own pipes for stdin, stdout and stderr,
// rlimits and the seccomp filter in the child, output caps, and a wall-clock timeout. When the
// command ends (or times out) every other process of the sandbox is killed, so nothing it started
// outlives it.
#pragma once

#include "k3/sandbox/wire.h"

namespace k3::sandbox::agent {

// Gets the seccomp filter once, when the agent starts: read from FILTER_FD (k3lab's compiled
// program, which is then closed) when it is >= 0 and holds one, else compiled here. Commands fail
// until it is done.
void prepare_commands(int filter_fd);

wire::ExecResult run_command(const wire::ExecRequest& request);

// SIGKILLs every process of this PID namespace but the caller and PID 1, until none is left.
void kill_all_others();

}  // namespace k3::sandbox::agent
