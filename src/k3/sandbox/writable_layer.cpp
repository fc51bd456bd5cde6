#include "k3/sandbox/writable_layer.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

namespace k3::sandbox {
namespace {

// PATH's extended attributes, names (sorted) with their values, less the ones overlayfs adds to a
// directory it copies up (where it came from; whether it holds copied-up entries), which change
// nothing seen.
std::string xattrs_of(const std::string& path) {
  std::string buf(4096, '\0');
  const ssize_t n = llistxattr(path.c_str(), buf.data(), buf.size());
  if (n <= 0) return n == 0 ? "" : "?";
  std::vector<std::string> names;
  for (size_t at = 0; at < size_t(n);) {
    const std::string name = buf.c_str() + at;
    at += name.size() + 1;
    if (name != "trusted.overlay.origin" && name != "trusted.overlay.impure") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& name : names) {
    char value[4096];
    const ssize_t len = lgetxattr(path.c_str(), name.c_str(), value, sizeof value);
    out += name + '\0' + std::to_string(len) + '\0';
    if (len > 0) out.append(value, size_t(len));
  }
  return out;
}

bool read_entry(const std::string& path, LayerEntry& e) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return false;
  e = {st.st_mode, st.st_uid, st.st_gid, st.st_ino, xattrs_of(path), ""};
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = readlink(path.c_str(), target, sizeof target);
    e.target.assign(target, n > 0 ? size_t(n) : 0);
  }
  return true;
}

// Calls VISIT(relative path) for each entry of the directory ROOT/REL, in no order; stops (false)
// when VISIT does.
bool for_each_entry(const std::string& root, const std::string& rel,
                    const std::function<bool(const std::string&)>& visit) {
  DIR* d = opendir((root + "/" + rel).c_str());
  if (!d) return false;
  bool ok = true;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (!(ok = visit(rel.empty() ? name : rel + "/" + name))) break;
  }
  closedir(d);
  return ok;
}

}  // namespace

LayerState read_layer(const std::string& upper) {
  LayerState state;
  std::function<bool(const std::string&)> visit = [&](const std::string& rel) {
    LayerEntry e;
    if (!read_entry(upper + "/" + rel, e)) return false;
    state[rel] = e;
    return !S_ISDIR(e.mode) || for_each_entry(upper, rel, visit);
  };
  LayerEntry root;
  if (read_entry(upper, root)) state[""] = root;
  for_each_entry(upper, "", visit);
  return state;
}

bool added_entries(const std::string& upper, const LayerState& start,
                   const std::vector<std::string>& layers, size_t max_entries,
                   std::vector<std::string>& added) {
  added.clear();
  size_t seen = 0;
  // The entry at REL as the image's top-most layer holding it has it; false if none does.
  auto in_image = [&](const std::string& rel, LayerEntry& e) {
    for (auto it = layers.rbegin(); it != layers.rend(); ++it)
      if (read_entry(*it + "/" + rel, e)) return true;
    return false;
  };
  std::function<bool(const std::string&)> visit = [&](const std::string& rel) {
    if (++seen > max_entries) return false;
    LayerEntry e, before;
    if (!read_entry(upper + "/" + rel, e)) return false;
    if (const auto it = start.find(rel); it != start.end()) {
      if (!(e == it->second)) return false;
    } else if (in_image(rel, before)) {
      // Only a directory the overlay copied up to hold new entries, as the image has it (a copy:
      // another inode).
      before.ino = e.ino;
      if (!S_ISDIR(e.mode) || !(e == before)) return false;
    } else {
      added.push_back(rel);
      return true;
    }
    return !S_ISDIR(e.mode) || for_each_entry(upper, rel, visit);
  };
  LayerEntry root;
  const auto start_root = start.find("");
  if (!read_entry(upper, root) || start_root == start.end() || !(root == start_root->second))
    return false;
  return for_each_entry(upper, "", visit);
}

}  // namespace k3::sandbox
