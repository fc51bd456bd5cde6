// Files written so that a crash never leaves a half-written one under the final name.
#pragma once

#include <string>
#include <string_view>

namespace k3 {

// Write to PATH.tmp.<pid>, fsync it, rename over PATH, fsync the directory.
void write_file_atomic(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);  // throws an Error naming the file
bool file_exists(const std::string& path);

}  // namespace k3
