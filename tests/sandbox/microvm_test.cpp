// The microVM backend: lifecycle and the attack cases that apply to a guest with its own kernel,
// on an image of busybox alone. Without /dev/kvm every test skips with one line saying so.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "fixture.h"
#include "k3/base/checksum.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/sandbox/image_store.h"
#include "k3/sandbox/microvm_backend.h"
#include "k3/sandbox/pool.h"

namespace k3::sandbox::testing {
namespace {

// QEMU processes whose command line names this test's store.
int count_qemus(const std::string& store) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(in)), {});
    n += cmd.find("qemu-system") != std::string::npos && cmd.find(store) != std::string::npos;
  }
  return n;
}

class Microvm : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    vm_ = make_backend(BackendKind::kMicrovm, *store_);
    if (const std::string why = vm_->unavailable_reason(); !why.empty())
      GTEST_SKIP() << "microvm backend unavailable: " << why;
    image_ = busybox_image();
    if (image_.empty()) GTEST_SKIP() << "no /bin/busybox (Debian package busybox-static)";
  }
  void TearDown() override {
    if (vm_ && !IsSkipped()) {
      vm_.reset();
      EXPECT_EQ(count_qemus(dir_), 0) << "a QEMU outlived its sandbox";
    }
    SandboxTest::TearDown();
  }
  std::unique_ptr<Sandbox> boot(Limits limits = {}) {
    limits.memory_bytes = std::min<uint64_t>(limits.memory_bytes, 128ull << 20);
    return vm_->create(store_->resolve(image_), limits);
  }
  std::unique_ptr<Backend> vm_;
  std::string image_;
};

// k3lab's own guest kernel in the store comes before /boot's, for `host` only where its
// configuration has 9p. Needs no KVM: the backend picks its kernels when made.
TEST(MicrovmKernel, TheStoresOwnKernelComesFirst) {
  const char* env = std::getenv("K3LAB_MICROVM_KERNEL");
  const std::string saved = env ? env : "";
  unsetenv("K3LAB_MICROVM_KERNEL");
  char tmpl[] = "/tmp/k3lab-kernel-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ImageStore store(dir);
  const std::string own = dir + "/microvm/vmlinux-k3lab-guest";
  std::filesystem::create_directories(dir + "/microvm");
  std::ofstream(own) << "a kernel";
  std::ofstream(dir + "/microvm/config-k3lab-guest")
      << "# CONFIG_MODULES is not set\nCONFIG_9P_FS=y\n";
  EXPECT_EQ(MicrovmBackend(store).kernel(false), own);
  EXPECT_EQ(MicrovmBackend(store).kernel(true), own);
  std::ofstream(dir + "/microvm/config-k3lab-guest") << "# CONFIG_9P_FS is not set\n";
  EXPECT_EQ(MicrovmBackend(store).kernel(false), own);
  EXPECT_NE(MicrovmBackend(store).kernel(true), own) << "no 9p: not for the host image";
  std::filesystem::remove_all(dir);
  if (!saved.empty()) setenv("K3LAB_MICROVM_KERNEL", saved.c_str(), 1);
}

TEST_F(Microvm, ExecFilesAndItsOwnKernel) {
  auto s = boot();
  const ExecResult r = sh(*s, "cat; echo err >&2; exit 3", "stdin here");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_data, "stdin here");
  EXPECT_EQ(r.stderr_data, "err\n");
  s->put("/work/a", "contents");
  EXPECT_EQ(s->get("/work/a"), "contents");
  EXPECT_THROW(s->get("/etc/hostname-none"), Error);
  // Its own kernel: the guest's release is the Debian guest kernel's, whatever the host runs.
  EXPECT_FALSE(sh(*s, "uname -r").stdout_data.empty());
}

// Replies far larger than the pipe QEMU writes them to arrive whole, however the host reads them.
TEST_F(Microvm, LargeTransfersArriveWhole) {
  Limits l;
  l.output_bytes = 8 << 20;
  auto s = boot(l);
  std::string bytes(24 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 2654435761u) >> 13);
  s->put("/tmp/big", bytes);
  EXPECT_EQ(s->get("/tmp/big"), bytes);
  const ExecResult r = sh(*s, "head -c 8388608 /tmp/big");
  EXPECT_EQ(r.stdout_data, bytes.substr(0, 8 << 20));
}

// The agent's channel is a virtio serial port, which opens once: commands (root in the guest) can
// neither forge its replies nor read k3lab's requests. A virtio console (hvc) would let them.
TEST_F(Microvm, CommandsCannotOpenTheAgentsChannel) {
  auto s = boot();
  const ExecResult r = sh(*s,
                          "for p in /dev/vport* /dev/hvc*; do [ -e $p ] || continue; echo $p; "
                          "(echo forged > $p) 2>/dev/null && echo OPENED; (head -c 1 $p) "
                          "2>/dev/null && echo OPENED; done; echo done");
  EXPECT_NE(r.stdout_data.find("/dev/vport"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(r.stdout_data.find("OPENED"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(sh(*s, "echo alive").stdout_data, "alive\n");
}

TEST_F(Microvm, HostFilesNetworkAndDevicesAreNotThere) {
  const std::string secret = dir_ + "/host-secret";
  std::ofstream(secret) << "host secret\n";
  auto s = boot();
  const ExecResult r = sh(*s, "cat " + secret + " 2>&1; ls /sys/class/net 2>&1; ls /dev/vd* 2>&1");
  EXPECT_EQ(r.stdout_data.find("host secret"), std::string::npos);
  EXPECT_EQ(r.stdout_data.find("eth"), std::string::npos) << "no network device: " << r.stdout_data;
  EXPECT_EQ(read_file(secret), "host secret\n");
}

TEST_F(Microvm, BombsTimeoutsAndOutputStayInside) {
  Limits l;
  l.disk_bytes = 16ull << 20;
  l.timeout_s = 3;
  l.output_bytes = 64 << 10;
  l.processes = 64;
  auto s = boot(l);
  ExecRequest q;
  q.argv = {"/bin/sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 3"};
  q.timeout_ms = 2000;
  s->exec(q);
  EXPECT_EQ(sh(*s, "echo alive").stdout_data, "alive\n");
  EXPECT_NE(
      sh(*s, "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1").stdout_data.find("No space"),
      std::string::npos);
  q.argv = {"yes"};
  q.timeout_ms = 500;
  const ExecResult y = s->exec(q);
  EXPECT_TRUE(y.timed_out);
  EXPECT_EQ(y.stdout_data.size(), 64u << 10);
  EXPECT_EQ(sh(*s, "echo alive").stdout_data, "alive\n");
}

TEST_F(Microvm, SymlinksAndDotDotInFileTransfersStayInTheGuest) {
  const std::string secret = dir_ + "/host-secret";
  std::ofstream(secret) << "host secret\n";
  auto s = boot();
  s->put("/../../.." + dir_ + "/escaped", "x");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/escaped"));
  EXPECT_EQ(s->get(dir_ + "/escaped"), "x");
  ASSERT_EQ(
      sh(*s, "busybox ln -s " + secret + " /tmp/link && busybox ln -s " + dir_ + " /tmp/dirlink")
          .exit_code,
      0);
  EXPECT_THROW(s->get("/tmp/link"), Error);
  EXPECT_THROW(s->put("/tmp/link", "overwritten"), Error) << "put never follows a final symlink";
  s->put("/tmp/dirlink/planted", "y");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/planted"));
  EXPECT_EQ(read_file(secret), "host secret\n");
}

TEST_F(Microvm, MemoryBombAndASecondGuestStayApart) {
  Limits l;
  l.memory_bytes = 64ull << 20;
  auto a = boot(l);
  auto b = boot();
  // Two buffers of 48 MiB fit in the guest's RAM but not in its commands' 64 MiB: when the second
  // fills, the out-of-memory killer ends the first (the larger) in the commands' cgroup, the guest
  // goes on. Exit statuses: 137 (SIGKILL) for the first, 143 (SIGTERM, sent here) for the second.
  const std::string bomb = "dd if=/dev/zero of=/dev/null bs=48M count=1000000 2>/dev/null";
  const ExecResult r = sh(*a, bomb + " & a=$!; sleep 2; " + bomb +
                                  " & b=$!; sleep 2; kill $b; wait $a; x=$?; wait $b; echo $x $?");
  EXPECT_EQ(r.stdout_data, "137 143\n");
  EXPECT_EQ(sh(*a, "echo alive").stdout_data, "alive\n");
  a->put("/tmp/a-secret", "mine");
  EXPECT_THROW(b->get("/tmp/a-secret"), Error);
  EXPECT_EQ(sh(*b, "find / -xdev -name a-secret 2>/dev/null").stdout_data, "");
}

TEST_F(Microvm, SignalsAndMountsReachOnlyTheGuest) {
  const pid_t host_child = fork();
  if (host_child == 0) {
    pause();
    _exit(0);
  }
  const int host_mounts = count_mounts_naming("/mnt");
  auto s = boot();
  // Root in the guest: its own kernel's processes and mounts, none of the host's.
  const ExecResult r = sh(*s, "kill -9 " + std::to_string(host_child) + " 2>&1; kill -9 " +
                                  std::to_string(getpid()) +
                                  " 2>&1; busybox mkdir -p /mnt && busybox mount -t tmpfs none "
                                  "/mnt && echo MOUNTED; kill -9 -1; sleep 1; echo done");
  EXPECT_NE(r.stdout_data.find("No such process"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(waitpid(host_child, nullptr, WNOHANG), 0) << "a host process was killed";
  kill(host_child, SIGKILL);
  waitpid(host_child, nullptr, 0);
  EXPECT_EQ(count_mounts_naming("/mnt"), host_mounts);
  EXPECT_EQ(sh(*s, "echo alive").stdout_data, "alive\n");
}

// The value of "NAME=VALUE" on a line of TEXT, or "".
std::string field(const std::string& text, const std::string& name) {
  const size_t at = text.find(name + "=");
  if (at == std::string::npos) return "";
  const size_t begin = at + name.size() + 1;
  return text.substr(begin, text.find('\n', begin) - begin);
}

TEST_F(Microvm, ProcAndSysTricksReachOnlyTheGuestKernel) {
  std::fflush(nullptr);
  const pid_t host_child = fork();
  if (host_child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with the test, whatever fails
    pause();
    _exit(0);
  }
  const std::string host_swappiness = read_file("/proc/sys/vm/swappiness");
  const std::string sysrq = "/proc/sys/kernel/sysrq";  // absent where the host kernel has none
  const std::string host_sysrq = file_exists(sysrq) ? read_file(sysrq) : "";
  const std::string host_name = read_file("/proc/sys/kernel/hostname");
  const std::string guest_swappiness = std::to_string((std::stoi(host_swappiness) + 1) % 100);
  Pool pool(*vm_, store_->resolve(image_), Limits{.memory_bytes = 128ull << 20}, 1);
  auto s = pool.acquire();
  // Root in the guest writes sysctls, reads /proc/kcore and SIGKILLs every process but init by
  // sysrq: all of it the guest kernel's, which holds only the guest's memory.
  const ExecResult r =
      sh(*s, "echo 1 > /proc/sys/kernel/sysrq; echo " + guest_swappiness +
                 " > /proc/sys/vm/swappiness; echo pwned > /proc/sys/kernel/hostname; "
                 "echo swappiness=$(cat /proc/sys/vm/swappiness); echo name=$(cat "
                 "/proc/sys/kernel/hostname); echo kcore=$(head -c 4096 /proc/kcore | wc -c); "
                 "echo mem=$(grep MemTotal /proc/meminfo | busybox tr -dc 0-9); "
                 "echo i > /proc/sysrq-trigger; sleep 5; echo not reached");
  EXPECT_EQ(r.signal, SIGKILL) << r.stdout_data << r.stderr_data;
  EXPECT_EQ(field(r.stdout_data, "swappiness"), guest_swappiness) << r.stdout_data;
  EXPECT_EQ(field(r.stdout_data, "name"), "pwned");
  EXPECT_EQ(field(r.stdout_data, "kcore"), "4096") << "the guest's root reads its own kernel";
  const std::string mem_kb = field(r.stdout_data, "mem");
  ASSERT_FALSE(mem_kb.empty()) << r.stdout_data;
  // The guest's RAM: the commands' 128 MiB and 128 MiB more for its kernel and agent.
  EXPECT_LT(std::stoll(mem_kb), 256 << 10) << "the guest kernel's memory is the guest's RAM";
  // The guest goes on (its init, the agent, is spared by sysrq) with its own settings.
  EXPECT_EQ(sh(*s, "cat /proc/sys/vm/swappiness").stdout_data, guest_swappiness + "\n");
  // The host's are as they were, and its processes alive.
  EXPECT_EQ(read_file("/proc/sys/vm/swappiness"), host_swappiness);
  EXPECT_EQ(file_exists(sysrq) ? read_file(sysrq) : "", host_sysrq);
  EXPECT_EQ(read_file("/proc/sys/kernel/hostname"), host_name);
  EXPECT_EQ(waitpid(host_child, nullptr, WNOHANG), 0) << "a host process was killed";
  kill(host_child, SIGKILL);
  waitpid(host_child, nullptr, 0);
  // And the pool serves the next user.
  pool.release(std::move(s));
  auto next = pool.acquire();
  EXPECT_EQ(sh(*next, "echo alive").stdout_data, "alive\n");
}

TEST_F(Microvm, DeviceNodesAndSetuidReachOnlyTheGuest) {
  const Image image = store_->resolve(image_);
  auto s = boot();
  const std::string disk = dir_ + "/store/microvm/" +
                           std::filesystem::path(image.layers.at(0)).filename().string() + ".ext4";
  const std::string disk_sum = sha256_hex(read_file(disk));
  // The guest's root sees its own block devices: the image's disk alone, which it cannot write
  // (QEMU attached it read-only), even marked writable. Device nodes it makes in the root do not
  // open at all (the overlay is mounted nodev), the image's disk or a host disk's number alike.
  const ExecResult r =
      sh(*s,
         "echo disks=$(busybox awk 'NR > 2 { print $4 }' /proc/partitions); "
         "set -- $(stat -c '%t %T' /dev/vda); busybox mknod /tmp/disk b $((0x$1)) $((0x$2)); "
         "dd if=/dev/zero of=/tmp/disk bs=4096 count=16 conv=notrunc,fsync; echo write=$?; "
         "busybox blockdev --setrw /dev/vda; echo read_only=$(busybox blockdev --getro /dev/vda); "
         "dd if=/dev/zero of=/dev/vda bs=4096 count=16 conv=notrunc,fsync; echo write_dev=$?; "
         "busybox mknod /tmp/sda b 8 0 && head -c 512 /tmp/sda >/dev/null; echo host_disk=$?; "
         "echo 'id -u' > /work-su && busybox chmod 4755 /work-su && "
         "busybox mknod /work-mem c 1 1 && echo made=1");
  EXPECT_EQ(field(r.stdout_data, "disks"), "vda") << r.stdout_data << r.stderr_data;
  EXPECT_NE(field(r.stdout_data, "write_dev"), "0") << r.stdout_data;
  EXPECT_EQ(field(r.stdout_data, "read_only"), "1") << r.stdout_data;
  EXPECT_NE(field(r.stdout_data, "write"), "0") << r.stdout_data;
  EXPECT_NE(field(r.stdout_data, "host_disk"), "0") << r.stdout_data;
  EXPECT_EQ(field(r.stdout_data, "made"), "1") << r.stdout_data;
  EXPECT_EQ(sha256_hex(read_file(disk)), disk_sum) << "the image's disk was written";
  // A setuid binary and a device node made by the guest's root do not reach the host as such: a
  // snapshot keeps the binary without its setuid bit, owned by the sandbox user, and no device.
  const Image snap = store_->resolve(s->snapshot(""));
  struct stat st {};
  ASSERT_EQ(lstat((snap.layers.back() + "/work-su").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u);
  EXPECT_EQ(st.st_uid, kSandboxUid);
  EXPECT_FALSE(std::filesystem::exists(snap.layers.back() + "/work-mem"));
  EXPECT_EQ(sh(*s, "echo alive").stdout_data, "alive\n");
}

TEST_F(Microvm, AGuestThatPanicsItsKernelEndsOnlyItself) {
  auto a = boot();
  auto b = boot();
  // Root in the guest may crash the guest's own kernel; QEMU then exits (-no-reboot).
  EXPECT_THROW(sh(*a, "echo c > /proc/sysrq-trigger; sleep 10"), Error);
  EXPECT_FALSE(a->alive());
  EXPECT_EQ(sh(*b, "echo alive").stdout_data, "alive\n");
}

TEST_F(Microvm, SnapshotKeepsNewFilesAndDeletionsForBothBackends) {
  // The busybox image plus a file to delete and a directory to replace.
  namespace fs = std::filesystem;
  const std::string src = dir_ + "/data-root";
  fs::copy(dir_ + "/busybox-root", src,
           fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::create_directories(src + "/data");
  fs::create_directories(src + "/hide");
  std::ofstream(src + "/data/old") << "old";
  std::ofstream(src + "/data/kept") << "kept";
  std::ofstream(src + "/hide/a") << "a";
  const Image base = store_->resolve(store_->import_directory(src, "with-data"));

  auto s = vm_->create(base, Limits{.memory_bytes = 128ull << 20});
  ASSERT_EQ(sh(*s,
               "rm /data/old /bin/yes && echo new > /data/new && busybox rm -r /hide && "
               "mkdir /hide && echo b > /hide/b && mkdir -p /work/sub && echo hi > "
               "/work/sub/f && busybox chmod 750 /work/sub/f && busybox ln -s sub/f /work/link")
                .exit_code,
            0);
  const std::string digest = s->snapshot("vm-snap");
  s->destroy();
  const Image snap = store_->resolve("vm-snap");
  EXPECT_EQ(snap.digest, digest);
  ASSERT_EQ(snap.layers.size(), 2u);
  // In the store's form of a layer: the deletion a whiteout, the replaced directory opaque, and
  // nothing of what the guest's init mounted on.
  struct stat st {};
  ASSERT_EQ(lstat((snap.layers[1] + "/bin/yes").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == 0) << "a whiteout";
  EXPECT_FALSE(fs::exists(snap.layers[1] + "/proc"));
  EXPECT_FALSE(fs::exists(snap.layers[1] + "/dev"));

  const std::string check =
      "ls /data /hide; cat /work/sub/f; stat -c %a /work/sub/f; busybox readlink /work/link; "
      "ls /bin/yes 2>&1 >/dev/null | wc -l";
  const std::string expected = "/data:\nkept\nnew\n\n/hide:\nb\nhi\n750\nsub/f\n1\n";
  auto from_vm = vm_->create(snap, Limits{.memory_bytes = 128ull << 20});
  EXPECT_EQ(sh(*from_vm, check).stdout_data, expected) << "a microVM from the snapshot";
  from_vm->destroy();
  auto from_ns = make("vm-snap");
  EXPECT_EQ(sh(*from_ns, check).stdout_data, expected) << "a namespaces sandbox from the snapshot";
}

// The built-in image needs a guest kernel with 9p (k3lab's own, or Debian's generic kernel,
// linux-image-amd64), which the backend picks by itself for it; skipped where there is none.
TEST_F(Microvm, TheHostImageSharesOnlyTheHostsUsrReadOnly) {
  std::unique_ptr<Sandbox> s;
  try {
    s = vm_->create(store_->resolve("host"), Limits{.memory_bytes = 256ull << 20});
  } catch (const Error& e) {
    if (e.message().find("over 9p") == std::string::npos) throw;
    GTEST_SKIP() << "no guest kernel with 9p (build-guest-kernel.sh, or linux-image-amd64)";
  }
  const ExecResult r = sh(*s,
                          "echo x > /usr/k3lab-probe; echo usr=$?; test -e /etc/passwd; echo "
                          "etc=$?; test -e /root; echo root=$?; echo tmp > /tmp/f && cat /tmp/f; "
                          "python3 -c 'print(6*7)'");
  EXPECT_NE(field(r.stdout_data, "usr"), "0") << r.stdout_data;
  EXPECT_NE(field(r.stdout_data, "etc"), "0") << "no /etc of the host";
  EXPECT_NE(field(r.stdout_data, "root"), "0") << "no /root of the host";
  EXPECT_NE(r.stdout_data.find("\ntmp\n42\n"), std::string::npos)
      << "/tmp writable; the host's python3 runs: " << r.stdout_data;
  EXPECT_FALSE(std::filesystem::exists("/usr/k3lab-probe"));
}

TEST_F(Microvm, DestroyLeavesNoQemu) {
  auto s = boot();
  EXPECT_EQ(count_qemus(dir_), 1);
  s->destroy();
  EXPECT_EQ(count_qemus(dir_), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/store/run"));
}

}  // namespace
}  // namespace k3::sandbox::testing
