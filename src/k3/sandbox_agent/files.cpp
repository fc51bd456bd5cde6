#include "files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace k3::sandbox::agent {
namespace {

std::string check_path(const std::string& path) {
  if (path.empty() || path[0] != '/') return "path '" + path + "' is not absolute";
  if (path.find('\0') != std::string::npos) return "path contains a NUL byte";
  return "";
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

std::string put_file(const std::string& path, const std::string& bytes, unsigned mode) {
  if (auto why = check_path(path); !why.empty()) return why;
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string dir = path.substr(0, slash);
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno_text(dir);
  }
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
  if (fd < 0) return errno_text(path);
  fchmod(fd, mode & 07777);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = errno_text(path);
      close(fd);
      return why;
    }
    done += size_t(w);
  }
  if (close(fd) != 0) return errno_text(path);
  return "";
}

std::string get_file(const std::string& path, std::string& out, size_t max) {
  if (auto why = check_path(path); !why.empty()) return why;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_text(path);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return path + " is not a regular file";
  }
  out.clear();
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text(path);
      close(fd);
      return why;
    }
    if (n == 0) break;
    if (out.size() + size_t(n) > max) {
      close(fd);
      return path + " is larger than " + std::to_string(max) + " bytes";
    }
    out.append(buf, size_t(n));
  }
  close(fd);
  return "";
}

}  // namespace k3::sandbox::agent
