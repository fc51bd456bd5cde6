// Making a used sandbox clean again for its next user (the namespaces backend's reset, docs/
// sandbox.md): no process but the agent, no System V IPC object, /dev and the mount table as they
// were when the agent started, and the files k3lab names removed from the root. k3lab checks
// the writable layer itself, from outside; this is the part only the inside can do.
#pragma once

#include <string>
#include <vector>

namespace k3::sandbox::agent {

// Remembers /dev and the mount table as they are at the agent's start (before any command).
void remember_clean_state();

// Kills every other process, removes every System V IPC object, restores /dev, removes each of
// PATHS (relative to the root; directories with everything in them; symlinks never followed),
// then checks that the mount table and /dev are as remembered. Returns "" or what is not clean.
std::string reset_sandbox(const std::vector<std::string>& paths);

}  // namespace k3::sandbox::agent
