// What commands inherit from the agent's own process beside its memory: every rlimit, the
// scheduling attributes (policy, priority, nice), the CPU affinity and the I/O priority. Commands
// run as the agent's user, so one may change these on the agent (prlimit, renice, taskset, chrt,
// ionice on PID 1); the agent remembers them as they were at its start, gives each command those,
// and restores its own on reset.
#pragma once

#include <string>

namespace k3::sandbox::agent {

// Remembers the agent's settings as they are at its start (before any command).
void remember_inherited_settings();

// In a command's child before exec (system calls only): the remembered settings, as far as an
// unprivileged process may go back to them (raising a lowered hard limit, lowering nice or
// leaving SCHED_IDLE needs a privilege; the reset then refuses).
void apply_remembered_settings();

// Gives the agent its remembered settings again; "" when they all read back as remembered, else
// which one could not be restored.
std::string restore_inherited_settings();

}  // namespace k3::sandbox::agent
