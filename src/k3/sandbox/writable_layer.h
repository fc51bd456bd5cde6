// A namespaces sandbox's writable layer (the overlay's upper directory, or the plain root of an
// image without layers) read from outside, for reset: what its users added, which removing through
// the sandbox's own root undoes, told apart from what removing cannot undo (a change to the image's
// files, or to the entries the sandbox started with). Reading the upper directory is safe while the
// overlay is mounted; changing it from outside is not (the overlay caches what it saw), so every
// removal goes through the sandbox's own root, by its agent.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace k3::sandbox {

// What of an entry a reset keeps as it was: type and permission bits, owner, extended attributes
// (names and values), a symlink's target, and (for the entries a sandbox starts with) the inode
// itself, so that one removed and made again is told apart. Times are not kept: a reused sandbox's
// directories may show its last user's mtimes.
struct LayerEntry {
  mode_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  ino_t ino = 0;
  std::string xattrs, target;
  bool operator==(const LayerEntry&) const = default;
};
using LayerState = std::map<std::string, LayerEntry>;  // by path relative to the layer

// Every entry under UPPER: the state a new sandbox starts with.
LayerState read_layer(const std::string& upper);

// The entries of UPPER that its users added, as paths relative to it (a directory stands for
// everything in it): neither in START nor in any of LAYERS (the image's, bottom first). Returns
// false when UPPER holds anything else that differs from a new sandbox's: an entry of START that
// changed, a file, link or whiteout over one of LAYERS' entries, a directory over one of theirs
// that differs from it or hides it (opaque), or more than MAX_ENTRIES entries to look at.
bool added_entries(const std::string& upper, const LayerState& start,
                   const std::vector<std::string>& layers, size_t max_entries,
                   std::vector<std::string>& added);

}  // namespace k3::sandbox
