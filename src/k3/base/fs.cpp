#include "k3/base/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "k3/base/error.h"

namespace k3 {

[[noreturn]] static void fail(const std::string& path, const std::string& what) {
  throw Error(what + ": " + std::strerror(errno), ErrorContext{path, "", -1});
}

void write_file_atomic(const std::string& path, std::string_view bytes, mode_t mode) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  ::unlink(tmp.c_str());  // one left by a crash, or planted (unlink removes a link, not its target)
  {
    FileWriter out(tmp, FileCreation::kNewOnly, mode);
    out.write(bytes);
    out.finish();
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(path, "cannot rename into place");
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  // A directory opens as a stream that reads as empty: say what it is instead.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error("is a directory, expected a file", ErrorContext{path, "", -1});
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

FileWriter::FileWriter(std::string path, FileCreation how, mode_t mode) : path_(std::move(path)) {
  const int flags = how == FileCreation::kNewOnly ? O_EXCL | O_NOFOLLOW : O_TRUNC;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, mode);
  if (fd_ < 0) k3::fail(path_, "cannot create");
}

FileWriter::~FileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(path_.c_str());
}

void FileWriter::fail(const char* what) {
  const int error = errno;
  ::close(fd_);
  fd_ = -1;
  ::unlink(path_.c_str());
  errno = error;
  k3::fail(path_, what);
}

void FileWriter::write(std::string_view bytes) {
  K3_CHECK_CTX(fd_ >= 0, (ErrorContext{path_, "", -1}), "written after it was finished");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write");
    }
    done += static_cast<size_t>(n);
  }
}

void FileWriter::finish() {
  K3_CHECK_CTX(fd_ >= 0, (ErrorContext{path_, "", -1}), "finished twice");
  if (::fsync(fd_) != 0) fail("cannot fsync");
  if (::close(std::exchange(fd_, -1)) != 0) {
    ::unlink(path_.c_str());
    k3::fail(path_, "cannot close");
  }
}

FileReader::FileReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) k3::fail(path_, "cannot open");
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    ::close(fd_);
    k3::fail(path_, "cannot stat");
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw Error("is a directory, expected a file", ErrorContext{path_, "", -1});
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

FileReader::FileReader(FileReader&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

FileReader& FileReader::operator=(FileReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

void FileReader::read(uint64_t offset, void* out, size_t n) const {
  auto* to = static_cast<char*>(out);
  size_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, to + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) k3::fail(path_, "cannot read");
    K3_CHECK_CTX(got > 0, (ErrorContext{path_, "", -1}), "ends at byte ", offset + done,
                 ", expected ", offset + n, ": the file shrank while open");
    done += static_cast<size_t>(got);
  }
}

}  // namespace k3
