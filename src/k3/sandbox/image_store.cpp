#include "k3/sandbox/image_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/sandbox/host_process.h"
#include "k3/sandbox/sandbox.h"

namespace fs = std::filesystem;

namespace k3::sandbox {
namespace {

bool is_hex_digest(const std::string& s, size_t min_len) {
  return s.size() >= min_len && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(c) && !std::isupper(c);
         });
}

// The digest of a regular file's contents, where each whole 4 KiB block of zeros (a hole, or
// zeros written) counts in a run of zero blocks, so that holes are never read (SEEK_DATA,
// SEEK_HOLE): a sparse file hashes as fast as its data, and the same whether its zeros are holes.
std::string file_digest(const std::string& path) {
  constexpr off_t kBlock = 4096;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  K3_CHECK(fd >= 0 && fstat(fd, &st) == 0, "cannot read ", path, ": ", std::strerror(errno));
  Sha256 h;
  uint64_t zero_blocks = 0;
  const auto add_zero_blocks = [&] {
    if (zero_blocks) {
      const std::string run = std::to_string(zero_blocks) + " zero blocks\n";
      h.update(std::string_view("\0", 1));
      h.update(run);
    }
    zero_blocks = 0;
  };
  std::vector<char> buf(1 << 20);
  const std::vector<char> zeros(kBlock, 0);
  const off_t size = st.st_size;
  bool ok = true;
  for (off_t at = 0; ok && at < size;) {  // AT is always at a block's start
    off_t data = lseek(fd, at, SEEK_DATA);
    if (data < 0) data = size;  // a hole to the end
    zero_blocks += uint64_t((data / kBlock * kBlock - at) / kBlock);
    at = data / kBlock * kBlock;
    off_t hole = data < size ? lseek(fd, data, SEEK_HOLE) : size;
    if (hole < 0 || hole > size) hole = size;
    const off_t end = std::min(size, (hole + kBlock - 1) / kBlock * kBlock);
    while (ok && at < end) {
      const ssize_t n =
          pread(fd, buf.data(), size_t(std::min<off_t>(end - at, off_t(buf.size()))), at);
      ok = n > 0;
      for (ssize_t b = 0; b < n; b += kBlock) {
        const size_t len = size_t(std::min<ssize_t>(kBlock, n - b));
        if (len == size_t(kBlock) && std::memcmp(buf.data() + b, zeros.data(), len) == 0) {
          ++zero_blocks;
          continue;
        }
        add_zero_blocks();
        h.update(std::string_view(buf.data() + b, len));
      }
      at += n > 0 ? n : 0;
    }
  }
  add_zero_blocks();
  close(fd);
  K3_CHECK(ok, "cannot read ", path, ": ", std::strerror(errno));
  return h.hex_digest();
}

void hash_tree(const fs::path& root, const fs::path& rel, Sha256& h) {
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(root / rel)) entries.push_back(e.path().filename());
  std::sort(entries.begin(), entries.end());
  for (const auto& name : entries) {
    const fs::path r = rel / name;
    struct stat st {};
    K3_CHECK(lstat((root / r).c_str(), &st) == 0, "cannot stat ", (root / r).string());
    h.update(r.string());
    h.update(std::string(1, '\0'));
    h.update(std::to_string(st.st_mode) + "\n");
    if (S_ISREG(st.st_mode)) {
      h.update(file_digest((root / r).string()));
    } else if (S_ISLNK(st.st_mode)) {
      h.update(fs::read_symlink(root / r).string());
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      h.update(std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)));
    } else if (S_ISDIR(st.st_mode)) {
      hash_tree(root, r, h);
    }
    h.update("\n");
  }
}

std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  return std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// "a/b/c" without empty, "." or ".." components.
bool is_plain_relative(const std::string& path) {
  if (path.empty() || path.find('\0') != std::string::npos) return false;
  for (size_t begin = 0; begin <= path.size();) {
    size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    begin = end + 1;
  }
  return true;
}

// Makes TREE's entries under the empty directory DIR. Each entry's parent must be a directory made
// before it, so nothing is made through a symlink or outside DIR.
void write_tree(const std::vector<wire::TreeEntry>& tree, const std::string& dir) {
  std::set<std::string> dirs = {""};
  for (const auto& e : tree) {
    const std::string what = "snapshot entry '" + e.path + "'";
    K3_CHECK(is_plain_relative(e.path), what, " is not a plain relative path");
    const size_t slash = e.path.rfind('/');
    K3_CHECK(dirs.count(slash == std::string::npos ? "" : e.path.substr(0, slash)), what,
             " does not follow its directory");
    const std::string path = dir + "/" + e.path;
    const mode_t perms = mode_t(e.mode) & 01777;  // no setuid or setgid bits
    bool made = false;
    if (S_ISDIR(e.mode)) {
      made = mkdir(path.c_str(), 0700) == 0 && chmod(path.c_str(), perms) == 0 &&
             (!e.opaque || lsetxattr(path.c_str(), "trusted.overlay.opaque", "y", 1, 0) == 0);
      dirs.insert(e.path);
    } else if (S_ISREG(e.mode)) {
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      made = fd >= 0 && fchmod(fd, perms & 0777) == 0;
      for (size_t done = 0; made && done < e.data.size();) {
        const ssize_t w = write(fd, e.data.data() + done, e.data.size() - done);
        made = w > 0;
        done += w > 0 ? size_t(w) : 0;
      }
      if (fd >= 0) made = close(fd) == 0 && made;
    } else if (S_ISLNK(e.mode)) {
      made = symlink(e.data.c_str(), path.c_str()) == 0;
    } else {
      K3_CHECK(S_ISCHR(e.mode), what, " is a special file other than a whiteout");
      made = mknod(path.c_str(), S_IFCHR | 0600, makedev(0, 0)) == 0;  // a whiteout
    }
    K3_CHECK(made, "cannot make ", what, ": ", std::strerror(errno));
  }
}

}  // namespace

std::string tree_digest(const std::string& dir) {
  Sha256 h;
  hash_tree(dir, "", h);
  return h.hex_digest();
}

std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    }
  }
  return out;
}

void check_image_name(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 128 && name[0] != '.' &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
      });
  K3_CHECK(ok, "image name '", printable(name), "' is not valid (letters, digits, '.', '_', '-')");
  K3_CHECK(name != "host", "image name 'host' is the built-in image");
}

ImageStore::ImageStore(std::string root) : root_(std::move(root)) {
  for (const char* sub : {"layers", "images", "names", "run", "staging"}) {
    std::error_code ec;
    fs::create_directories(fs::path(root_) / sub, ec);
    K3_CHECK(!ec, "cannot create the sandbox store ", root_, ": ", ec.message());
  }
  // Others may pass through to run/ (bubblewrap, as the sandbox user, binds a root from there),
  // never list or read the rest.
  ::chmod(root_.c_str(), 0711);
  ::chmod((root_ + "/run").c_str(), 0711);
  for (const char* sub : {"layers", "images", "names", "staging"})
    ::chmod((root_ + "/" + sub).c_str(), 0700);
}

std::string ImageStore::default_root() {
  if (const char* env = std::getenv("K3LAB_SANDBOX_STORE"); env && *env) return env;
  if (geteuid() == 0) return "/var/lib/k3lab/sandbox";  // not under /root: see the class comment
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/k3lab/sandbox";
}

std::string ImageStore::staging_dir() const {
  const std::string dir = root_ + "/staging/" + unique_suffix();
  fs::create_directory(dir);
  return dir;
}

// Layers belong to the sandbox user (so a sandbox may change what its image holds, in its own
// writable layer), and lose setuid and setgid bits (a sandbox runs with no_new_privs anyway).
void hand_to_sandbox_user(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (lstat(e.path().c_str(), &st) != 0) continue;
    lchown(e.path().c_str(), kSandboxUid, kSandboxUid);
    if (S_ISREG(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID)))
      ::chmod(e.path().c_str(), st.st_mode & 0777 & ~mode_t(S_ISUID | S_ISGID));
  }
  lchown(dir.c_str(), kSandboxUid, kSandboxUid);
}

std::string ImageStore::store_layer(const std::string& staged) {
  std::string digest;
  try {
    hand_to_sandbox_user(staged);
    digest = tree_digest(staged);
  } catch (...) {
    fs::remove_all(staged);
    throw;
  }
  const std::string dest = root_ + "/layers/" + digest;
  std::error_code ec;
  fs::rename(staged, dest, ec);
  if (ec) fs::remove_all(staged);  // already stored (the same contents), or a racing import
  K3_CHECK(fs::is_directory(dest), "cannot store layer ", digest, ": ", ec.message());
  return digest;
}

std::string ImageStore::write_image(bool host_system, const std::vector<std::string>& layers,
                                    const std::string& name) {
  const nlohmann::json manifest = {{"host_system", host_system}, {"layers", layers}};
  const std::string text = manifest.dump() + "\n";
  const std::string digest = sha256_hex(text);
  const std::string path = root_ + "/images/" + digest + ".json";
  if (!file_exists(path)) write_file_atomic(path, text);
  if (!name.empty()) write_file_atomic(root_ + "/names/" + name, digest + "\n");
  return digest;
}

std::string ImageStore::import_directory(const std::string& dir, const std::string& name) {
  if (!name.empty()) check_image_name(name);
  K3_CHECK(fs::is_directory(dir), "image source ", dir, " is not a directory");
  const std::string staged = staging_dir();
  try {
    run_program({"cp", "-a", "--", fs::path(dir).string() + "/.", staged});
  } catch (...) {
    fs::remove_all(staged);
    throw;
  }
  return write_image(false, {store_layer(staged)}, name);
}

std::string ImageStore::import_tarball(const std::string& tarball, const std::string& name) {
  if (!name.empty()) check_image_name(name);
  K3_CHECK(fs::is_regular_file(tarball), "image tarball ", tarball, " is not a file");
  const std::string staged = staging_dir();
  try {
    // GNU tar refuses members with `..` and strips leading '/', so nothing lands outside STAGED.
    run_program({"tar", "-x", "--no-same-owner", "-f", tarball, "-C", staged});
  } catch (...) {
    fs::remove_all(staged);
    throw;
  }
  return write_image(false, {store_layer(staged)}, name);
}

std::string ImageStore::add_layer(const Image& base, const std::string& upper,
                                  const std::string& name,
                                  const std::vector<std::string>& mount_points) {
  if (!name.empty()) check_image_name(name);
  const std::string staged = staging_dir();
  try {
    // -a keeps the whiteouts (character devices 0:0) and the opaque-directory xattrs.
    run_program({"cp", "-a", "--", upper + "/.", staged});
  } catch (...) {
    fs::remove_all(staged);
    throw;
  }
  return add_staged_layer(base, staged, name, mount_points);
}

std::string ImageStore::add_layer(const Image& base, const std::vector<wire::TreeEntry>& tree,
                                  const std::string& name,
                                  const std::vector<std::string>& mount_points) {
  if (!name.empty()) check_image_name(name);
  const std::string staged = staging_dir();
  try {
    write_tree(tree, staged);
  } catch (...) {
    fs::remove_all(staged);
    throw;
  }
  return add_staged_layer(base, staged, name, mount_points);
}

std::string ImageStore::add_staged_layer(const Image& base, const std::string& staged,
                                         const std::string& name,
                                         const std::vector<std::string>& mount_points) {
  for (const auto& m : mount_points) {
    const fs::path p = fs::path(staged) / fs::path(m).relative_path();
    std::error_code ec;
    if (fs::is_symlink(p) || fs::is_empty(p, ec)) fs::remove(p, ec);
  }
  std::vector<std::string> layers;
  for (const auto& path : base.layers) layers.push_back(fs::path(path).filename().string());
  layers.push_back(store_layer(staged));
  return write_image(base.host_system, layers, name);
}

Image ImageStore::resolve(const std::string& ref) const {
  if (ref == "host") return Image{"host", {}, true};
  std::string digest;
  const std::string name_file = root_ + "/names/" + ref;
  if (!ref.empty() && ref.find('/') == std::string::npos && ref[0] != '.' &&
      file_exists(name_file)) {
    digest = read_file(name_file);
    digest.erase(digest.find_last_not_of("\n ") + 1);
  } else if (is_hex_digest(ref, 12)) {
    for (const auto& e : fs::directory_iterator(root_ + "/images")) {
      const std::string file = e.path().stem().string();
      if (file.rfind(ref, 0) != 0) continue;
      K3_CHECK(digest.empty(), "image '", ref, "' is ambiguous: give more of its digest");
      digest = file;
    }
  }
  K3_CHECK(!digest.empty(), "unknown image '", printable(ref),
           "' (not 'host', a name or a digest in ", root_, ")");
  const std::string path = root_ + "/images/" + digest + ".json";
  K3_CHECK(file_exists(path), "image '", printable(ref), "' points at missing manifest ", path);
  // Written by the store itself: anything else than its own shape is damage, said in our words.
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception&) {
    throw DamagedStore("image manifest " + path + " is damaged: not valid JSON");
  }
  const nlohmann::json* layers =
      manifest.is_object() && manifest.contains("layers") ? &manifest["layers"] : nullptr;
  const bool shaped = layers && layers->is_array() &&
                      std::all_of(layers->begin(), layers->end(),
                                  [](const nlohmann::json& l) {
                                    return l.is_string() && is_hex_digest(l.get<std::string>(), 64);
                                  }) &&
                      manifest.value("host_system", nlohmann::json(false)).is_boolean();
  if (!shaped)
    throw DamagedStore("image manifest " + path +
                       " is damaged: not {\"host_system\": bool, \"layers\": [digests]}");
  Image image{digest, {}, manifest.value("host_system", false)};
  for (const auto& layer : *layers) {
    const std::string dir = root_ + "/layers/" + layer.get<std::string>();
    K3_CHECK(fs::is_directory(dir), "image ", digest, " is missing its layer ", dir);
    image.layers.push_back(dir);
  }
  return image;
}

std::vector<std::pair<std::string, std::string>> ImageStore::names() const {
  std::vector<std::pair<std::string, std::string>> out = {{"host", "host"}};
  for (const auto& e : fs::directory_iterator(root_ + "/names")) {
    std::string digest = read_file(e.path().string());
    digest.erase(digest.find_last_not_of("\n ") + 1);
    out.emplace_back(e.path().filename().string(), digest);
  }
  std::sort(out.begin() + 1, out.end());
  return out;
}

ImageStore::RunDir::~RunDir() {
  if (fd_ >= 0) ::close(fd_);
}

ImageStore::RunDir::RunDir(RunDir&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}

ImageStore::RunDir& ImageStore::RunDir::operator=(RunDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

namespace {

// run/ opened and flocked in MODE: shared by each sandbox between making its directory and
// locking it, exclusive while abandoned ones are removed, so that none is seen in between.
int lock_runs(const std::string& run, int mode) {
  const int fd = ::open(run.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  K3_CHECK(fd >= 0, "cannot open ", run, ": ", std::strerror(errno));
  while (flock(fd, mode) != 0)
    if (errno != EINTR) {
      const int e = errno;
      ::close(fd);
      throw Error("cannot lock " + run + ": " + std::strerror(e));
    }
  return fd;
}

}  // namespace

ImageStore::RunDir ImageStore::make_run_dir(const std::string& sandbox_id) const {
  const std::string run = root_ + "/run", dir = run + "/" + sandbox_id;
  const int runs = lock_runs(run, LOCK_SH);
  int fd = -1;
  if (::mkdir(dir.c_str(), 0777) == 0)
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int e = errno;
  const bool locked = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(runs);
  if (!locked && fd >= 0) ::close(fd);
  K3_CHECK(locked, "cannot create ", dir, ": ", std::strerror(fd >= 0 ? errno : e));
  return RunDir(dir, fd);
}

size_t ImageStore::remove_abandoned_runs(
    const std::function<void(const std::string&)>& ended) const {
  const std::string run = root_ + "/run";
  const int runs = lock_runs(run, LOCK_EX);
  size_t removed = 0;
  std::error_code ec;
  try {
    for (const auto& e : fs::directory_iterator(run, ec)) {
      const std::string path = e.path().string(), name = e.path().filename().string();
      if (e.is_directory(ec) && !e.is_symlink(ec)) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {  // its holder is gone
          ended(name);
          fs::remove_all(path, ec);
          fs::remove(path + ".log", ec);
          ++removed;
        }
        ::close(fd);
      } else if (e.path().extension() == ".log" && !fs::exists(e.path().parent_path() /
                                                                e.path().stem(), ec)) {
        fs::remove(path, ec);  // its directory was removed, its end cut short
      }
    }
  } catch (...) {
    ::close(runs);
    throw;
  }
  ::close(runs);
  return removed;
}

}  // namespace k3::sandbox
