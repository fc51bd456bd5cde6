// What sandboxes leave when the process that made them dies without destroying them (SIGKILL, a
// crash): their run directories (unlocked, see ImageStore::RunDir) and their cgroups. Removed at
// the next start of a backend on the same store, and at once by a guardian process.
#pragma once

#include <string>

#include "k3/sandbox/image_store.h"

namespace k3::sandbox {

// Removes the store's abandoned run directories and their sandboxes' cgroups; returns how many.
size_t remove_leftovers(const ImageStore& store);

// Forks a guardian that waits for this process to end, however it ends, then removes what its
// sandboxes left in the store at ROOT (remove_leftovers) and exits. Call it before starting
// threads: the guardian is a fork of this process. It ignores SIGINT, SIGTERM and SIGHUP, which a
// terminal or a supervisor sends to the whole process group, so that it outlives the rest.
void start_guardian(const std::string& root);

}  // namespace k3::sandbox
