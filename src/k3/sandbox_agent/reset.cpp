#include "reset.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "run_command.h"

namespace k3::sandbox::agent {
namespace {

std::string read_all(const char* path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What of an entry must stay as it was: type and permissions, owner, device number.
struct Entry {
  mode_t mode;
  uid_t uid;
  gid_t gid;
  dev_t rdev;
  bool operator==(const Entry&) const = default;
};
using Tree = std::map<std::string, Entry>;

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
    out[path] = {st.st_mode, st.st_uid, st.st_gid, st.st_rdev};
    if (S_ISDIR(st.st_mode)) list_tree(path, dev, out);
  }
  closedir(d);
}

Tree dev_tree() {
  Tree t;
  struct stat st {};
  if (lstat("/dev", &st) == 0) {
    t["/dev"] = {st.st_mode, st.st_uid, st.st_gid, st.st_rdev};
    list_tree("/dev", st.st_dev, t);
  }
  return t;
}

Tree g_dev;
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
    const int next = part.empty() || part == "." || part == ".."
                         ? -1
                         : openat(dir, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dir);
    dir = next;
  }
  const std::string name = path.substr(start);
  const bool ok = dir >= 0 && !name.empty() && name != "." && name != ".." &&
                  remove_entry(dir, name.c_str());
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
  g_dev = dev_tree();
  g_mounts = read_all("/proc/self/mountinfo");
}

std::string reset_sandbox(const std::vector<std::string>& paths) {
  kill_all_others();
  if (kill(-1, 0) == 0 || errno != ESRCH) return "processes are left";
  if (!clear_ipc("shm", [](int id) { shmctl(id, IPC_RMID, nullptr); }) ||
      !clear_ipc("msg", [](int id) { msgctl(id, IPC_RMID, nullptr); }) ||
      !clear_ipc("sem", [](int id) { semctl(id, 0, IPC_RMID); }))
    return "System V IPC objects are left";
  for (const auto& [path, entry] : dev_tree()) {
    const bool topmost_new = !g_dev.count(path) && g_dev.count(path.substr(0, path.rfind('/')));
    if (topmost_new && !remove_path(path.substr(1))) return "cannot remove " + path;
  }
  if (dev_tree() != g_dev) return "/dev differs from the start";
  for (const auto& path : paths) {
    if (!remove_path(path)) return "cannot remove /" + path + ": " + std::strerror(errno);
  }
  if (read_all("/proc/self/mountinfo") != g_mounts) return "the mount table differs from the start";
  return "";
}

}  // namespace k3::sandbox::agent
