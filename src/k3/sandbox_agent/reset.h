// Making a used sandbox clean again for its next user (the namespaces backend's reset, docs/
// sandbox.md): no process but the agent, no System V IPC object, the agent's inherited settings
// (inherited.h), /dev, /dev/shm, the root's and /tmp's own permissions and extended attributes and
// the mount table as they were when the agent started, and the files k3lab names removed. k3lab
// checks the writable layer itself, from outside; this is the part only the inside can do.
#pragma once

#include <string>
#include <vector>

namespace k3::sandbox::agent {

// Remembers all of that as it is at the agent's start (before any command).
void remember_clean_state();

// Kills every other process, removes every System V IPC object, restores the agent's settings,
// removes what is new in /dev and /dev/shm and restores the permissions and extended attributes of
// what was there, removes each of PATHS (relative to the root; directories with everything in
// them; symlinks never followed), then checks that all of it and the mount table are as
// remembered. Returns "" or what is not clean.
std::string reset_sandbox(const std::vector<std::string>& paths);

}  // namespace k3::sandbox::agent
