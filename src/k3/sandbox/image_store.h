// Images: root file systems stored once by content and shared read-only by every sandbox made
// from them. An image is a stack of layers (directories, bottom first); a sandbox adds a private
// writable layer on top (overlayfs), and a snapshot turns that layer into a new image's top layer.
// The built-in image `host` has no layers of its own: the host's /usr, /bin, /lib* read-only and
// nothing else of the host.
//
// Layout under the store's root:
//   layers/<sha256>/      a layer's tree, named by the hash of its contents (tree_digest)
//   images/<sha256>.json  {"host_system": bool, "layers": [layer digests, bottom first]}
//   names/<name>          the digest a name points at
//   run/<sandbox id>/     a live sandbox's private directory (removed when it is destroyed),
//                         locked by its process while the sandbox lives
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "k3/base/error.h"
#include "k3/sandbox/wire.h"

namespace k3::sandbox {

struct Image {
  std::string digest;               // "host" for the built-in image
  std::vector<std::string> layers;  // absolute paths of the layer trees, bottom first
  bool host_system = false;         // the host's /usr, /bin, /lib* under everything, read-only
};

class ImageStore {
 public:
  // ROOT is created if missing; every directory above it must be passable by others (the sandbox
  // user reaches run/). default_root(): $K3LAB_SANDBOX_STORE, else /var/lib/k3lab/sandbox for
  // root, else ~/.cache/k3lab/sandbox.
  explicit ImageStore(std::string root);
  static std::string default_root();
  const std::string& root() const { return root_; }

  // A directory or a tarball (anything tar reads) as a one-layer image; NAME ("" for none) points
  // at it. Returns the image's digest. The same contents give the same digest and are stored once.
  std::string import_directory(const std::string& dir, const std::string& name);
  std::string import_tarball(const std::string& tarball, const std::string& name);
  // BASE with one more layer, a copy of the tree at UPPER (an overlayfs upper directory: its
  // whiteouts and opaque directories are kept), less the top-level MOUNT_POINTS that a backend
  // made there (where they are symlinks or empty). Returns the new image's digest.
  std::string add_layer(const Image& base, const std::string& upper, const std::string& name,
                        const std::vector<std::string>& mount_points);
  // The same from TREE, an upper directory read inside a sandbox (a microVM's) and sent as
  // entries; untrusted: a path that is not plain, comes before its directory or repeats one, or a
  // special file other than a whiteout, is an Error.
  std::string add_layer(const Image& base, const std::vector<wire::TreeEntry>& tree,
                        const std::string& name, const std::vector<std::string>& mount_points);

  // "host", a name, or a digest (or a unique prefix of at least 12 hex digits). Unknown: an Error.
  Image resolve(const std::string& ref) const;
  std::vector<std::pair<std::string, std::string>> names() const;  // (name, digest), sorted

  // A sandbox's directory under run/, locked (flock) while this lives: a process that ends in
  // any way, SIGKILL included, leaves it unlocked, which marks it abandoned. Its sandbox removes
  // the directory itself.
  class RunDir {
   public:
    RunDir() = default;
    RunDir(std::string path, int lock_fd) : path_(std::move(path)), fd_(lock_fd) {}
    ~RunDir();  // unlocks
    RunDir(RunDir&& o) noexcept;
    RunDir& operator=(RunDir&& o) noexcept;
    const std::string& path() const { return path_; }

   private:
    std::string path_;
    int fd_ = -1;
  };
  // A fresh empty directory under run/ for one sandbox.
  RunDir make_run_dir(const std::string& sandbox_id) const;
  // Removes run/'s abandoned directories (and logs), calling ENDED with each one's sandbox id
  // first (to end what else its sandbox left); never one being made or in use. Returns how many.
  size_t remove_abandoned_runs(const std::function<void(const std::string&)>& ended) const;

 private:
  std::string store_layer(const std::string& staged);  // renames a staged tree into layers/
  // BASE plus the staged tree (removed either way) less its empty MOUNT_POINTS, as an image.
  std::string add_staged_layer(const Image& base, const std::string& staged,
                               const std::string& name,
                               const std::vector<std::string>& mount_points);
  std::string write_image(bool host_system, const std::vector<std::string>& layer_digests,
                          const std::string& name);
  std::string staging_dir() const;
  std::string root_;
};

// The SHA-256 of a directory tree: every entry's relative path, type, permission bits, and its
// contents (file bytes, link target, device number), in sorted order. Owners are not part of it.
std::string tree_digest(const std::string& dir);

// Image and layer names: letters, digits, '.', '_', '-' (1 to 128), not starting with '.'.
void check_image_name(const std::string& name);

// TEXT as an error message quotes it: bytes outside printable ASCII as \xNN, so that a name with
// a newline or an escape sequence cannot break or forge the one line of an error.
std::string printable(const std::string& text);

// A file of the store that is not what it must be (a damaged manifest): the store's fault, not
// the request's; the message names the file.
struct DamagedStore : Error {
  using Error::Error;
};

}  // namespace k3::sandbox
