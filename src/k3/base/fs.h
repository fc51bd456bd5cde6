// Files written so that a crash never leaves a half-written one under the final name, and files
// written and read piece by piece, for contents too large to hold in memory at once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace k3 {

// Write to PATH.tmp.<pid>, fsync it, rename over PATH, fsync the directory. The temporary file is
// made new with MODE (less the umask), never through a symlink or into an existing file left or
// planted at its name, so a secret written 0600 is never readable by others at any moment.
void write_file_atomic(const std::string& path, std::string_view bytes, mode_t mode = 0644);
std::string read_file(const std::string& path);  // throws an Error naming the file
bool file_exists(const std::string& path);

// How FileWriter opens its path: created or truncated, or made new (O_EXCL | O_NOFOLLOW: an
// entry already there, a symlink included, is an error).
enum class FileCreation { kCreateOrTruncate, kNewOnly };

// A file written in pieces at PATH itself: write it where a crash leaves nothing under a final
// name, e.g. a directory renamed into place when complete. finish() fsyncs and closes it;
// destroyed unfinished, it removes the file. Errors name the file.
class FileWriter {
 public:
  explicit FileWriter(std::string path, FileCreation how = FileCreation::kCreateOrTruncate,
                      mode_t mode = 0644);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(std::string_view bytes);
  void finish();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* what);  // closes and removes the file, then throws
  std::string path_;
  int fd_ = -1;
};

// A file read by byte ranges (pread). It stays open, so a file renamed over it meanwhile does not
// change what it reads. Errors name the file.
class FileReader {
 public:
  explicit FileReader(std::string path);
  ~FileReader();
  FileReader(FileReader&& other) noexcept;
  FileReader& operator=(FileReader&& other) noexcept;

  uint64_t size() const { return size_; }  // when opened
  // Exactly N bytes from OFFSET; a short read (the file shrank) is an error.
  void read(uint64_t offset, void* out, size_t n) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace k3
