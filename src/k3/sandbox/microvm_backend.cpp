#include "k3/sandbox/microvm_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/sandbox/agent_sandbox.h"
#include "k3/sandbox/cgroups.h"
#include "k3/sandbox/leftovers.h"
#include "k3/sandbox/host_process.h"
#include "k3/sandbox/namespaces_backend.h"

namespace fs = std::filesystem;

namespace k3::sandbox {
namespace {

constexpr int64_t kBootDeadlineMs = 60000;            // software emulation boots slowly
constexpr uint64_t kQemuOverheadBytes = 96ull << 20;  // QEMU itself, beyond the guest's RAM
// The guest's RAM is the commands' memory limit plus what its kernel keeps for itself (some 71 MiB
// of the cloud kernel's, about 50 MiB more of the generic kernel's) and its agent needs.
constexpr uint64_t kGuestKernelBytes = 128ull << 20;

// The modules the guest init loads, by name; their dependencies come first (modules.dep). Those a
// kernel has built in are skipped: Debian's cloud kernel has ext4 and crc32c built in, its generic
// kernel as modules (crc32c is ext4's soft dependency, not in modules.dep).
const std::vector<std::string> kGuestModules = {"virtio_mmio",    "virtio_blk", "virtio_console",
                                                "crc32c_generic", "ext4",       "overlay",
                                                "9pnet_virtio",   "9p"};

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A kernel's release: "R" of DIR/vmlinuz-R (Debian's, in /boot) or DIR/vmlinux-R (k3lab's own).
std::string release_of(const std::string& kernel) {
  const std::string name = fs::path(kernel).filename().string();
  return name.substr(name.find('-') + 1);
}

// The modules of a kernel: /lib/modules/RELEASE.
std::string modules_of(const std::string& kernel) { return "/lib/modules/" + release_of(kernel); }

// OPTION's value ("y", "m", ...) in the configuration beside KERNEL (DIR/config-RELEASE), or "".
std::string config_value(const std::string& kernel, const std::string& option) {
  std::ifstream in((fs::path(kernel).parent_path() / ("config-" + release_of(kernel))).string());
  for (std::string line; std::getline(in, line);)
    if (line.rfind(option + "=", 0) == 0) return line.substr(option.size() + 1);
  return "";
}

// Whether KERNEL loads modules at all (one without a configuration beside it is taken to have
// all it needs built in).
bool uses_modules(const std::string& kernel) {
  return config_value(kernel, "CONFIG_MODULES") == "y";
}

bool has_9p(const std::string& kernel) {
  const std::string v = config_value(kernel, "CONFIG_9P_FS");
  return v == "y" || (v == "m" && fs::exists(modules_of(kernel) + "/kernel/fs/9p"));
}

// $K3LAB_MICROVM_KERNEL, else k3lab's own guest kernel in the store
// (scripts/build-guest-kernel.sh), else the newest /boot/vmlinuz-* (by name); of those with 9p only
// where WITH_9P: the `host` image needs 9p, which k3lab's kernel and Debian's generic kernel have
// and its cloud kernel not. "" if there is none (the `host` image then cannot run).
std::string find_kernel(const std::string& store_root, bool with_9p) {
  if (const char* env = std::getenv("K3LAB_MICROVM_KERNEL"); env && *env)
    return !with_9p || has_9p(env) ? env : "";
  const std::string own = store_root + "/microvm/vmlinux-k3lab-guest";
  if (fs::exists(own) && (!with_9p || has_9p(own))) return own;
  std::string best;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/boot", ec)) {
    const std::string path = e.path().string();
    if (e.path().filename().string().rfind("vmlinuz-", 0) == 0 && path > best &&
        (!with_9p || has_9p(path)))
      best = path;
  }
  return best;
}

// Module files in load order: each after what it depends on.
std::vector<std::string> module_files(const std::string& modules_dir) {
  std::map<std::string, std::vector<std::string>> deps;  // path -> dependency paths
  std::map<std::string, std::string> by_name;
  std::ifstream in(modules_dir + "/modules.dep");
  K3_CHECK(in, "cannot read ", modules_dir, "/modules.dep (the guest kernel's modules)");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    const std::string path = line.substr(0, colon);
    std::istringstream rest(line.substr(colon + 1));
    for (std::string d; rest >> d;) deps[path].push_back(d);
    deps[path];
    std::string name = fs::path(path).filename().string();
    name = name.substr(0, name.find(".ko"));
    std::replace(name.begin(), name.end(), '-', '_');
    by_name[name] = path;
  }
  std::vector<std::string> order;
  std::set<std::string> seen;
  std::function<void(const std::string&)> visit = [&](const std::string& path) {
    if (!seen.insert(path).second) return;
    // modules.dep lists all dependencies, deepest last: load them in reverse.
    for (auto it = deps[path].rbegin(); it != deps[path].rend(); ++it) visit(*it);
    order.push_back(path);
  };
  for (const auto& name : kGuestModules) {
    const auto it = by_name.find(name);
    if (it != by_name.end()) visit(it->second);  // absent: built into this kernel
  }
  return order;
}

// /dev/kvm comes from PVM (a shadow-paging hypervisor that runs inside a virtual machine without
// hardware virtualization): its guests must be kernels built for it, as Debian's are not.
bool kvm_is_pvm_only() {
  return fs::exists("/sys/module/kvm_pvm") && !fs::exists("/sys/module/kvm_intel") &&
         !fs::exists("/sys/module/kvm_amd");
}

uint64_t guest_ram_bytes(const Limits& limits) {
  return (limits.memory_bytes + kGuestKernelBytes + (1 << 20) - 1) & ~uint64_t((1 << 20) - 1);
}

uint64_t tree_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    total += 4096;
    if (e.is_regular_file() && !e.is_symlink()) total += e.file_size();
  }
  return total;
}

class MicrovmSandbox : public AgentSandbox {
 public:
  MicrovmSandbox(const std::vector<std::string>& args, ImageStore& store, Image image,
                 const Limits& limits, const std::string& id, ImageStore::RunDir run,
                 ForkThread& forker)
      : AgentSandbox(id, limits, std::move(run), kBootDeadlineMs), store_(store), image_(std::move(image)) {
    try {
      cgroups_ =
          Cgroups("k3lab-" + id_, {guest_ram_bytes(limits_) + kQemuOverheadBytes, 0, limits_.cpus});
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      start(
          forker, [&] { execv(argv[0], argv.data()); }, "microvm");
    } catch (...) {
      destroy();
      throw;
    }
  }

  // The guest's writable layer lives in its own memory: its agent reads it and sends it over.
  std::string snapshot(const std::string& name) override {
    std::lock_guard lock(mutex_);
    const std::vector<wire::TreeEntry> tree = agent_layer();
    // What the guest's init made in the root to mount on (guest_init.cpp), where left empty.
    std::vector<std::string> mount_points = {"/proc", "/dev"};
    if (image_.host_system)
      mount_points.insert(mount_points.end(), {"/usr", "/bin", "/sbin", "/lib", "/lib64"});
    return store_.add_layer(image_, tree, name, mount_points);
  }

 private:
  ImageStore& store_;
  Image image_;
};

}  // namespace

MicrovmBackend::MicrovmBackend(ImageStore& store)
    : store_(store),
      qemu_(find_program("qemu-system-x86_64")),
      kernel_(find_kernel(store.root(), false)),
      host_kernel_(find_kernel(store.root(), true)) {
  const bool tcg =
      std::getenv("K3LAB_MICROVM_TCG") && std::string(std::getenv("K3LAB_MICROVM_TCG")) == "1";
  accel_ = access("/dev/kvm", R_OK | W_OK) == 0 ? "kvm" : tcg ? "tcg" : "";
  try {
    agent_ = agent_path();
  } catch (const Error& e) {
    why_unavailable_ = e.message();
  }
  if (qemu_.empty()) {
    why_unavailable_ = "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)";
  } else if (accel_ == "kvm" && kvm_is_pvm_only() && !std::getenv("K3LAB_MICROVM_KERNEL")) {
    why_unavailable_ =
        "/dev/kvm here is PVM (kvm_pvm, no hardware virtualization), which boots only kernels "
        "built as PVM guests, as Debian's are not (set K3LAB_MICROVM_KERNEL to such a kernel)";
  } else if (kernel_.empty()) {
    why_unavailable_ = "no guest kernel in /boot (Debian package linux-image-cloud-amd64)";
  } else if (uses_modules(kernel_) && !fs::is_directory(modules_of(kernel_))) {
    why_unavailable_ = "the guest kernel's modules " + modules_of(kernel_) + " are missing";
  } else if (accel_.empty()) {
    why_unavailable_ =
        "no usable /dev/kvm on this machine (K3LAB_MICROVM_TCG=1 runs guests under slow software "
        "emulation)";
  }
  remove_leftovers(store_);  // of sandboxes whose process was killed
  remove_stale_cgroups("k3lab-vm-", 60);
}

std::string MicrovmBackend::unavailable_reason() const { return why_unavailable_; }

std::string MicrovmBackend::initramfs(const std::string& kernel) {
  std::lock_guard lock(build_mutex_);
  Sha256 key;
  key.update(kernel + "\n");
  key.update(sha256_hex(read_file(agent_)));
  const std::string dir = store_.root() + "/microvm";
  fs::create_directories(dir);
  const std::string out = dir + "/initramfs-" + key.hex_digest().substr(0, 16) + ".cpio";
  if (fs::exists(out)) return out;
  const std::string staged = dir + "/staging-" + std::to_string(getpid());
  fs::remove_all(staged);
  for (const char* d : {"dev", "proc", "modules", "newroot", "rw", "layers", "empty"})
    fs::create_directories(staged + "/" + d);
  fs::copy_file(agent_, staged + "/init");
  K3_CHECK(mknod((staged + "/dev/console").c_str(), S_IFCHR | 0600, makedev(5, 1)) == 0,
           "mknod /dev/console: ", std::strerror(errno));
  int n = 0;
  const std::string modules = modules_of(kernel);
  for (const auto& rel :
       uses_modules(kernel) ? module_files(modules) : std::vector<std::string>{}) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%02d-", n++);
    std::string name = fs::path(rel).filename().string();
    name = name.substr(0, name.find(".ko"));
    std::replace(name.begin(), name.end(), '-', '_');
    K3_CHECK(rel.size() < 3 || rel.substr(rel.size() - 3) == ".ko", "compressed module ", rel,
             " is not supported");
    fs::copy_file(modules + "/" + rel, staged + "/modules/" + prefix + name + ".ko");
  }
  run_program(
      {"sh", "-c",
       "cd " + quoted(staged) + " && find . | cpio --quiet -o -H newc > " + quoted(out + ".tmp")});
  fs::rename(out + ".tmp", out);
  fs::remove_all(staged);
  return out;
}

std::string MicrovmBackend::layer_disk(const std::string& layer_dir) {
  std::lock_guard lock(build_mutex_);
  const std::string dir = store_.root() + "/microvm";
  fs::create_directories(dir);
  const std::string out = dir + "/" + fs::path(layer_dir).filename().string() + ".ext4";
  if (fs::exists(out)) return out;
  const uint64_t mib = (tree_bytes(layer_dir) * 5 / 4 >> 20) + 16;
  run_program({"mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-d", layer_dir, out + ".tmp",
               std::to_string(mib) + "M"});
  fs::rename(out + ".tmp", out);
  return out;
}

std::unique_ptr<Sandbox> MicrovmBackend::create(const Image& image, const Limits& limits) {
  if (!why_unavailable_.empty()) throw Error(why_unavailable_);
  check_limits(limits);
  // Store images boot the kernel found first; `host` the first with 9p (Debian's generic kernel
  // takes some 50 MiB more of the guest's memory than its cloud kernel).
  const std::string& kernel = image.host_system ? host_kernel_ : kernel_;
  K3_CHECK(!image.host_system || !kernel.empty(),
           "the microvm backend shares the host's /usr over 9p, which no guest kernel at hand has "
           "(Debian's cloud kernel lacks it): use an image of its own (k3lab sandbox import), or "
           "build k3lab's guest kernel (scripts/build-guest-kernel.sh), or install "
           "linux-image-amd64 (or set K3LAB_MICROVM_KERNEL to a kernel with 9p)");
  K3_CHECK(image.layers.size() <= 20, "a microvm image may have at most 20 layers");
  const std::string id = new_sandbox_id("vm-");
  ImageStore::RunDir run_dir = store_.make_run_dir(id);
  const std::string run = run_dir.path();
  const uint64_t disk = limits.disk_bytes ? limits.disk_bytes : (256ull << 20);
  // No legacy timers or interrupt controller: under KVM the guest keeps time with kvmclock; under
  // software emulation it is told the TSC's rate instead of measuring it, and the translation
  // cache is capped at 32 MiB (it grows to hundreds of MiB otherwise, past the memory the host's
  // cgroup allows QEMU beyond the guest's RAM). The channel is a serial port, not a console: QEMU
  // holds a port's output while the host is behind in reading it, where it drops a console's.
  std::vector<std::string> argv = {
      qemu_,
      "-M",
      "microvm,x-option-roms=off,rtc=off,pit=off,pic=off",
      "-accel",
      accel_ == "kvm" ? "kvm" : "tcg,tb-size=32",
      "-cpu",
      accel_ == "kvm" ? "host" : "max",
      "-m",
      std::to_string(guest_ram_bytes(limits) >> 20) + "M",
      "-smp",
      "1",
      "-nodefaults",
      "-no-user-config",
      "-display",
      "none",
      "-no-reboot",
      "-serial",
      "file:" + run + "/console.log",
      "-kernel",
      kernel,
      "-initrd",
      initramfs(kernel),
      "-append",
      std::string(accel_ == "kvm" ? "" : "tsc_early_khz=2000000 lpj=4000000 tsc=reliable ") +
          "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init k3.layers=" +
          std::to_string(image.layers.size()) + " k3.host=" + (image.host_system ? "1" : "0") +
          " k3.disk=" + std::to_string(disk) + " k3.memory=" + std::to_string(limits.memory_bytes),
      "-device",
      "virtio-serial-device",
      "-chardev",
      "stdio,id=agent,signal=off",
      "-device",
      "virtserialport,chardev=agent,nr=1,name=k3lab.agent"};
  for (size_t i = 0; i < image.layers.size(); ++i) {
    const std::string drive = "layer" + std::to_string(i);
    argv.insert(argv.end(), {"-drive",
                             "id=" + drive + ",file=" + layer_disk(image.layers[i]) +
                                 ",format=raw,if=none,readonly=on",
                             "-device", "virtio-blk-device,drive=" + drive});
  }
  if (image.host_system) {
    argv.insert(argv.end(), {"-fsdev", "local,id=usr,path=/usr,security_model=none,readonly=on",
                             "-device", "virtio-9p-device,fsdev=usr,mount_tag=usr"});
  }
  return std::make_unique<MicrovmSandbox>(argv, store_, image, limits, id, std::move(run_dir),
                                          forker_);
}

}  // namespace k3::sandbox
