#include "reset.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "inherited.h"
#include "run_command.h"

namespace k3::sandbox::agent {
namespace {

std::string read_all(const char* path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What of an entry must stay as it was: type and permissions, owner, device number, a symlink's
// target and the extended attributes (names and values) that the sandbox user can see.
using Xattrs = std::map<std::string, std::string>;
struct Entry {
  mode_t mode;
  uid_t uid;
  gid_t gid;
  dev_t rdev;
  std::string target;
  Xattrs xattrs;
  bool operator==(const Entry&) const = default;
};
using Tree = std::map<std::string, Entry>;

Xattrs read_xattrs(const std::string& path) {
  Xattrs out;
  char names[4096];
  const ssize_t n = llistxattr(path.c_str(), names, sizeof names);
  if (n < 0) return {{"", "unreadable"}};  // never equal to a readable list
  for (const char* name = names; name < names + n; name += std::strlen(name) + 1) {
    char value[4096];
    const ssize_t len = lgetxattr(path.c_str(), name, value, sizeof value);
    out[name] = len < 0 ? "?" : std::string(value, size_t(len));
  }
  return out;
}

Entry read_entry(const std::string& path, const struct stat& st) {
  Entry e{st.st_mode, st.st_uid, st.st_gid, st.st_rdev, "", read_xattrs(path)};
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = readlink(path.c_str(), target, sizeof target);
    e.target.assign(target, n > 0 ? size_t(n) : 0);
  }
  return e;
}

// The entries below DIR on DIR's own file system (mounts on it, such as /dev/pts, are skipped).
void list_tree(const std::string& dir, dev_t dev, Tree& out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || st.st_dev != dev) continue;
    out[path] = read_entry(path, st);
    if (S_ISDIR(st.st_mode)) list_tree(path, dev, out);
  }
  closedir(d);
}

// What a reset keeps and restores: the root and /tmp themselves (the writable layer's entries a
// sandbox starts with, whose contents k3lab lists for removal), and all of /dev and /dev/shm.
Tree kept_tree() {
  Tree t;
  for (const char* top : {"/", "/tmp", "/dev", "/dev/shm"}) {
    struct stat st {};
    if (lstat(top, &st) != 0) continue;
    t[top] = read_entry(top, st);
    if (std::strncmp(top, "/dev", 4) == 0) list_tree(top, st.st_dev, t);
  }
  return t;
}

// Gives PATH its remembered permission bits back and removes the extended attributes it did not
// have (what its owner, the sandbox user, may change on an entry that is otherwise as it was; the
// entries kept start with none of the user's).
void restore_entry(const std::string& path, const Entry& was) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return;
  for (const auto& [name, value] : read_xattrs(path))
    if (!was.xattrs.count(name)) lremovexattr(path.c_str(), name.c_str());
  if (!S_ISLNK(st.st_mode) && (st.st_mode & 07777) != (was.mode & 07777))
    chmod(path.c_str(), was.mode & 07777);
}

// The first path where A and B differ, or "".
std::string first_difference(const Tree& a, const Tree& b) {
  for (const auto& [path, entry] : a) {
    const auto it = b.find(path);
    if (it == b.end() || !(it->second == entry)) return path;
  }
  for (const auto& [path, entry] : b)
    if (!a.count(path)) return path;
  return "";
}

Tree g_kept;
std::string g_mounts;

// Removes NAME in the directory PARENT: a directory with everything in it (made searchable and
// writable first, which only its owner, the sandbox user, can), never following a symlink.
bool remove_entry(int parent, const char* name) {
  struct stat st {};
  if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return unlinkat(parent, name, 0) == 0 || errno == ENOENT;
  if (fchmodat(parent, name, 0700, 0) != 0) return false;
  const int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return false;
  }
  bool ok = true;
  while (const dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      ok = remove_entry(fd, e->d_name) && ok;
  }
  closedir(d);
  return ok && unlinkat(parent, name, AT_REMOVEDIR) == 0;
}

// Removes PATH, relative to the root, reaching it through real directories only.
bool remove_path(const std::string& path) {
  int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t start = 0;
  for (size_t slash; dir >= 0 && (slash = path.find('/', start)) != std::string::npos;
       start = slash + 1) {
    const std::string part = path.substr(start, slash - start);
    const int next =
        part.empty() || part == "." || part == ".."
            ? -1
            : openat(dir, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dir);
    dir = next;
  }
  const std::string name = path.substr(start);
  const bool ok =
      dir >= 0 && !name.empty() && name != "." && name != ".." && remove_entry(dir, name.c_str());
  if (dir >= 0) close(dir);
  return ok;
}

// Removes every object of one System V IPC kind listed in /proc/sysvipc/KIND (the IPC namespace's
// own); the id is the second column. True when none is left.
template <typename Remove>
bool clear_ipc(const char* kind, Remove remove) {
  const std::string file = std::string("/proc/sysvipc/") + kind;
  for (int pass = 0; pass < 2; ++pass) {
    std::istringstream lines(read_all(file.c_str()));
    std::string line;
    std::getline(lines, line);  // the header
    bool any = false;
    for (long key, id; std::getline(lines, line);) {
      std::istringstream fields(line);
      if (fields >> key >> id) {
        any = true;
        remove(int(id));
      }
    }
    if (!any) return true;
  }
  return false;
}

}  // namespace

void remember_clean_state() {
  g_kept = kept_tree();
  g_mounts = read_all("/proc/self/mountinfo");
}

std::string reset_sandbox(const std::vector<std::string>& paths) {
  kill_all_others();
  if (kill(-1, 0) == 0 || errno != ESRCH) return "processes are left";
  if (!clear_ipc("shm", [](int id) { shmctl(id, IPC_RMID, nullptr); }) ||
      !clear_ipc("msg", [](int id) { msgctl(id, IPC_RMID, nullptr); }) ||
      !clear_ipc("sem", [](int id) { semctl(id, 0, IPC_RMID); }))
    return "System V IPC objects are left";
  if (const std::string why = restore_inherited_settings(); !why.empty()) return why;
  for (const auto& [path, entry] : kept_tree()) {
    const bool topmost_new = !g_kept.count(path) && g_kept.count(path.substr(0, path.rfind('/')));
    if (topmost_new && !remove_path(path.substr(1))) return "cannot remove " + path;
  }
  for (const auto& [path, entry] : g_kept) restore_entry(path, entry);
  if (const std::string path = first_difference(g_kept, kept_tree()); !path.empty())
    return path + " differs from the start";
  for (const auto& path : paths) {
    if (!remove_path(path)) return "cannot remove /" + path + ": " + std::strerror(errno);
  }
  if (read_all("/proc/self/mountinfo") != g_mounts) return "the mount table differs from the start";
  return "";
}

}  // namespace k3::sandbox::agent
