#include "files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "k3/sandbox/wire.h"

namespace k3::sandbox::agent {
namespace {

std::string check_path(const std::string& path) {
  if (path.empty() || path[0] != '/') return "path '" + path + "' is not absolute";
  if (path.find('\0') != std::string::npos) return "path contains a NUL byte";
  return "";
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Reads the whole of FD (closing it) into OUT, adding to *TOTAL, at most MAX in all.
std::string read_all(int fd, const std::string& path, std::string& out, size_t* total, size_t max) {
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
    if (*total + size_t(n) > max) {
      close(fd);
      return path + ": more than " + std::to_string(max) + " bytes";
    }
    out.append(buf, size_t(n));
    *total += size_t(n);
  }
  close(fd);
  return "";
}

// Appends the entries under the directory DIR_FD (at PREFIX, "" for the top) to TREE, parents
// first, names sorted; never follows a symlink.
std::string add_tree(int dir_fd, const std::string& prefix,
                     std::vector<k3::sandbox::wire::TreeEntry>& tree, size_t* total, size_t max) {
  const int listing = dup(dir_fd);
  DIR* d = listing < 0 ? nullptr : fdopendir(listing);
  if (!d) return errno_text("/" + prefix);
  std::vector<std::string> names;
  while (const dirent* e = readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    k3::sandbox::wire::TreeEntry entry;
    entry.path = prefix + name;
    struct stat st {};
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return errno_text("/" + entry.path);
    entry.mode = st.st_mode;
    *total += entry.path.size() + 32;
    if (S_ISREG(st.st_mode)) {
      const int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return errno_text("/" + entry.path);
      if (auto why = read_all(fd, "/" + entry.path, entry.data, total, max); !why.empty())
        return why;
    } else if (S_ISLNK(st.st_mode)) {
      entry.data.resize(size_t(st.st_size) + 1);
      const ssize_t n = readlinkat(dir_fd, name.c_str(), entry.data.data(), entry.data.size());
      if (n < 0) return errno_text("/" + entry.path);
      entry.data.resize(size_t(n));
      *total += size_t(n);
    } else if (S_ISDIR(st.st_mode)) {
      const int sub = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) return errno_text("/" + entry.path);
      char flag[2] = {};
      entry.opaque =
          fgetxattr(sub, "trusted.overlay.opaque", flag, sizeof flag) == 1 && flag[0] == 'y';
      tree.push_back(entry);
      const std::string why = add_tree(sub, entry.path + "/", tree, total, max);
      close(sub);
      if (!why.empty()) return why;
      continue;
    } else if (!(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0))) {
      continue;  // a device node, FIFO or socket: not part of a layer
    }
    if (*total > max) return "the writable layer is larger than " + std::to_string(max) + " bytes";
    tree.push_back(std::move(entry));
  }
  return "";
}

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

std::string open_for_get(const std::string& path, size_t max, int& fd, uint64_t& size,
                         std::string& bytes) {
  if (auto why = check_path(path); !why.empty()) return why;
  fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_text(path);
  struct stat st {};
  std::string why;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = path + " is not a regular file";
  } else if (uint64_t(st.st_size) > max) {
    why = path + " has " + std::to_string(st.st_size) + " bytes, more than the " +
          std::to_string(max) + " one transfer may hold";
  } else if (st.st_size == 0) {
    // Empty, or a file whose size says nothing of its bytes (/proc's): read whole.
    size_t total = 0;
    why = read_all(fd, path, bytes, &total, max);
    fd = -1;  // closed by read_all
    return why;
  }
  if (!why.empty()) {
    close(fd);
    fd = -1;
    return why;
  }
  size = uint64_t(st.st_size);
  return "";
}

bool copy_file(int fd, uint64_t size, int out) {
  char buf[65536];
  while (size > 0) {
    const ssize_t n = read(fd, buf, size_t(std::min<uint64_t>(size, sizeof buf)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    k3::sandbox::wire::write_bytes(out, std::string_view(buf, size_t(n)));
    size -= uint64_t(n);
  }
  return true;
}

std::string archive_tree(int layer_fd, std::string& out, size_t max) {
  if (layer_fd < 0) return "this sandbox's writable layer is read from outside, not by its agent";
  std::vector<k3::sandbox::wire::TreeEntry> tree;
  size_t total = 0;
  if (auto why = add_tree(layer_fd, "", tree, &total, max); !why.empty()) return why;
  out = k3::sandbox::wire::encode(tree);
  return "";
}

}  // namespace k3::sandbox::agent
