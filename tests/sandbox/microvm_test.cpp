// The microVM backend: lifecycle and the attack cases that apply to a guest with its own kernel,
// on an image of busybox alone. Without /dev/kvm every test skips with one line saying so.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "fixture.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

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
  auto a = boot();
  auto b = boot();
  // Far more than the guest's 128 MiB: the command fails inside, the guest goes on.
  const ExecResult r = sh(*a, "x=$(head -c 400000000 /dev/zero | busybox tr '\\0' a); echo ${#x}");
  EXPECT_NE(r.stdout_data, "400000000\n");
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

TEST_F(Microvm, DestroyLeavesNoQemu) {
  auto s = boot();
  EXPECT_EQ(count_qemus(dir_), 1);
  s->destroy();
  EXPECT_EQ(count_qemus(dir_), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/store/run"));
}

}  // namespace
}  // namespace k3::sandbox::testing
