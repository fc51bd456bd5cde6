// File transfers for the agent, inside the sandbox: whatever a path names (symlinks, `..`), it
// resolves within the sandbox's own root, never on the host.
#pragma once

#include <cstdint>
#include <string>

namespace k3::sandbox::agent {

// Writes BYTES to PATH (absolute) with MODE, creating parent directories; the last component is
// never followed if it is a symlink. Returns "" or the reason.
std::string put_file(const std::string& path, const std::string& bytes, unsigned mode);
// Opens the regular file PATH of at most MAX bytes for reading into FD, its size into SIZE; a file
// of size 0, which may still hold bytes (/proc's), is read whole into BYTES instead (FD is -1).
// Returns "" or the reason (FD is then -1).
std::string open_for_get(const std::string& path, size_t max, int& fd, uint64_t& size,
                         std::string& bytes);
// Writes SIZE bytes of FD to OUT (wire::write_bytes); false when FD ends before.
bool copy_file(int fd, uint64_t size, int out);
// The tree under the directory LAYER_FD (a microVM's writable layer, the overlay's upper
// directory) as wire::encode of its entries, at most MAX bytes, into OUT: regular files,
// directories, symlinks, whiteouts and opaque directories (other special files are left out).
// Returns "" or the reason.
std::string archive_tree(int layer_fd, std::string& out, size_t max);

}  // namespace k3::sandbox::agent
