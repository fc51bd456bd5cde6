// A namespaces sandbox's life: exec with stdin, stdout, stderr and exit status; files in and out;
// snapshots as images; destroy leaving nothing behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "fixture.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::sandbox::testing {
namespace {

TEST_F(SandboxTest, ExecPassesStdinAndReturnsOutputAndStatus) {
  auto s = make();
  const ExecResult r = sh(*s, "cat; echo to-stderr >&2; exit 3", "hello from stdin");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_data, "hello from stdin");
  EXPECT_EQ(r.stderr_data, "to-stderr\n");
  EXPECT_FALSE(r.timed_out);
  // A second command in the same sandbox sees what the first left in its files.
  EXPECT_EQ(sh(*s, "echo kept > /tmp/f").exit_code, 0);
  EXPECT_EQ(sh(*s, "cat /tmp/f").stdout_data, "kept\n");
}

TEST_F(SandboxTest, MissingCommandIsExit127WithAReason) {
  auto s = make();
  ExecRequest q;
  q.argv = {"no-such-command-k3"};
  const ExecResult r = s->exec(q);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.error.find("no-such-command-k3"), std::string::npos) << r.error;
}

TEST_F(SandboxTest, PutAndGetFiles) {
  auto s = make();
  s->put("/work/deep/dir/a.txt", "contents\n", 0600);
  EXPECT_EQ(s->get("/work/deep/dir/a.txt"), "contents\n");
  EXPECT_EQ(sh(*s, "stat -c %a /work/deep/dir/a.txt").stdout_data, "600\n");
  EXPECT_THROW(s->get("/work/none"), Error);
  EXPECT_THROW(s->get("/work"), Error);  // a directory
  EXPECT_THROW(s->put("relative/path", "x"), Error);
}

// A file larger than the agent could hold beside its own pages under the memory limit streams
// out; one larger than a transfer may be is refused in one line, and the agent answers on.
TEST_F(SandboxTest, GettingLargeFilesNeitherKillsTheAgentNorFailsUnclearly) {
  Limits l;
  l.disk_bytes = l.file_size_bytes = 320ull << 20;
  auto s = make("host", l);
  ASSERT_EQ(sh(*s, "head -c 200M /dev/zero | tr '\\0' k > /tmp/big; truncate -s 300M /tmp/sparse")
                .exit_code,
            0);
  const std::string big = s->get("/tmp/big");
  EXPECT_EQ(big.size(), 200u << 20);
  EXPECT_EQ(big.find_first_not_of('k'), std::string::npos);
  try {
    s->get("/tmp/sparse");
    ADD_FAILURE() << "a file past the transfer limit was sent";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "/tmp/sparse has 314572800 bytes, more than the 268431360 one transfer may hold");
  }
  // A file whose size says nothing of its bytes comes whole.
  EXPECT_EQ(s->get("/proc/self/status").rfind("Name:", 0), 0u);
  EXPECT_EQ(sh(*s, "echo alive").stdout_data, "alive\n");
}

// Limits too small for the agent and a command are refused at creation, naming the minimum.
TEST_F(SandboxTest, LimitsTooSmallForASandboxAreRefusedAtCreation) {
  Limits l;
  l.memory_bytes = 1 << 20;
  try {
    make("host", l);
    ADD_FAILURE() << "a sandbox with 1 MiB of memory was made";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "a memory limit of 1 MiB is too small: a sandbox needs at least 16 MiB (each "
              "command's address space is limited to it)");
  }
  l.memory_bytes = kMinMemoryBytes;
  l.processes = kMinProcesses - 1;
  EXPECT_THROW(make("host", l), Error);
  l.processes = kMinProcesses;
  const ExecResult r = sh(*make("host", l), "python3 -c 'print(6*7)'");
  EXPECT_EQ(r.stdout_data, "42\n") << "the minimum works: " << r.stderr_data;
}

TEST_F(SandboxTest, SnapshotIsAnImageAndTheBaseIsUnchanged) {
  auto s = make();
  s->put("/data/answer", "42");
  ASSERT_EQ(sh(*s, "echo more > /data/more").exit_code, 0);
  const std::string digest = s->snapshot("snap");
  s->destroy();
  auto from_snapshot = make("snap");
  EXPECT_EQ(from_snapshot->get("/data/answer"), "42");
  EXPECT_EQ(from_snapshot->get("/data/more"), "more\n");
  EXPECT_EQ(make(digest.substr(0, 16))->get("/data/answer"), "42");
  // Deleting a file of the image in a sandbox made from it hides it there (an overlay whiteout),
  // and a snapshot keeps that.
  ASSERT_EQ(sh(*from_snapshot, "rm /data/more").exit_code, 0);
  from_snapshot->snapshot("snap2");
  EXPECT_NE(sh(*make("snap2"), "cat /data/more").exit_code, 0);
  EXPECT_EQ(make("snap2")->get("/data/answer"), "42");
  EXPECT_THROW(make("host")->get("/data/answer"), Error);
}

// A layer sent by a sandbox (a microVM's agent) is untrusted: nothing it names may land outside
// the new layer, and no device but a whiteout is made.
// A snapshot keeps a sparse file's holes, never reading them: fast, and small on disk.
TEST_F(SandboxTest, SnapshotOfASparseFileKeepsItsHoles) {
  Limits l;
  l.file_size_bytes = 8ull << 30;
  auto s = make("host", l);
  ASSERT_EQ(sh(*s,
               "truncate -s 4G /tmp/sparse && printf middle | dd of=/tmp/sparse bs=1 seek=2G "
               "conv=notrunc 2>/dev/null && printf end >> /tmp/sparse")
                .exit_code,
            0);
  const auto start = std::chrono::steady_clock::now();
  const std::string digest = s->snapshot("sparse");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10) << "the holes were read";
  auto t = make(digest);
  EXPECT_EQ(sh(*t,
               "stat -c %s /tmp/sparse; tail -c 3 /tmp/sparse; echo;"
               "dd if=/tmp/sparse bs=1 skip=2G count=6 2>/dev/null")
                .stdout_data,
            "4294967299\nend\nmiddle");
  const uint64_t on_disk = std::stoull(sh(*t, "stat -c %b /tmp/sparse").stdout_data) * 512;
  EXPECT_LT(on_disk, 1u << 20) << "the holes were filled";
  // Zeros written hash as holes do: the same contents, the same digest.
  const std::string dense = dir_ + "/dense", sparse = dir_ + "/sparse";
  std::filesystem::create_directories(dense);
  std::filesystem::create_directories(sparse);
  std::ofstream(dense + "/f") << std::string(3 << 20, '\0') << "x";
  std::ofstream(sparse + "/f").close();
  std::filesystem::resize_file(sparse + "/f", 3 << 20);
  std::ofstream(sparse + "/f", std::ios::app) << "x";
  EXPECT_EQ(tree_digest(dense), tree_digest(sparse));
}

TEST_F(SandboxTest, ALayerSentAsEntriesIsCheckedBeforeItIsStored) {
  using wire::TreeEntry;
  const Image host = store_->resolve("host");
  const auto add = [&](std::vector<TreeEntry> tree) {
    return store_->add_layer(host, tree, "", {});
  };
  const std::string good = add({{"d", S_IFDIR | 0755, "", true},
                                {"d/f", S_IFREG | 04755, "bytes", false},
                                {"d/l", S_IFLNK | 0777, "f", false},
                                {"gone", S_IFCHR, "", false}});
  const std::string layer = store_->resolve(good).layers.at(0);
  EXPECT_EQ(read_file(layer + "/d/f"), "bytes");
  EXPECT_EQ(std::filesystem::read_symlink(layer + "/d/l"), "f");
  struct stat st {};
  ASSERT_EQ(lstat((layer + "/d/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "no setuid bit";
  ASSERT_EQ(lstat((layer + "/gone").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == 0);
  char flag = 0;
  EXPECT_EQ(lgetxattr((layer + "/d").c_str(), "trusted.overlay.opaque", &flag, 1), 1);
  const std::string outside = dir_ + "/outside";
  for (const auto& bad : std::vector<std::vector<TreeEntry>>{
           {{"../outside", S_IFREG | 0644, "x", false}},
           {{"/outside", S_IFREG | 0644, "x", false}},
           {{"a/./b", S_IFREG | 0644, "x", false}},
           {{"l", S_IFLNK | 0777, dir_, false}, {"l/outside", S_IFREG | 0644, "x", false}},
           {{"f", S_IFREG | 0644, "x", false}, {"f", S_IFREG | 0644, "y", false}},
           {{"disk", S_IFBLK | 0600, "", false}},
       })
    EXPECT_THROW(add(bad), Error) << bad.back().path;
  EXPECT_FALSE(std::filesystem::exists(outside));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/store/staging"));
}

TEST_F(SandboxTest, ImagesFromDirectoryAndTarballAreContentAddressed) {
  const std::string src = dir_ + "/rootfs";
  std::filesystem::create_directories(src + "/etc");
  std::ofstream(src + "/etc/motd") << "an image\n";
  std::filesystem::create_symlink("motd", src + "/etc/link");
  const std::string a = store_->import_directory(src, "a");
  EXPECT_EQ(store_->import_directory(src, "b"), a) << "the same tree, the same digest";
  ASSERT_EQ(std::system(("tar -C " + src + " -cf " + dir_ + "/rootfs.tar .").c_str()), 0);
  EXPECT_EQ(store_->import_tarball(dir_ + "/rootfs.tar", "c"), a);
  std::ofstream(src + "/etc/motd") << "changed\n";
  EXPECT_NE(store_->import_directory(src, "d"), a);
  // A layered image: the image's files under the host's system directories.
  const Image image = store_->resolve("a");
  EXPECT_FALSE(image.host_system);
  EXPECT_EQ(image.layers.size(), 1u);
  EXPECT_THROW(store_->resolve("nope"), Error);
  EXPECT_THROW(store_->import_directory(src, "../evil"), Error);
  EXPECT_THROW(store_->import_directory(dir_ + "/missing", "x"), Error);
}

TEST_F(SandboxTest, ImageWithoutHostSystemRunsTheStaticAgentOnly) {
  // An image of one static program: the sandbox has nothing of the host.
  const std::string src = dir_ + "/tiny";
  std::filesystem::create_directories(src + "/bin");
  std::filesystem::copy_file(agent_path(), src + "/bin/agent-copy");
  auto s = make(store_->resolve(store_->import_directory(src, "tiny")).digest);
  ExecRequest q;
  q.argv = {"/bin/sh", "-c", "true"};
  EXPECT_EQ(s->exec(q).exit_code, 127) << "no shell in this image";
  EXPECT_THROW(s->get("/usr/bin/env"), Error);
}

TEST_F(SandboxTest, BusyboxImageRunsWithNothingOfTheHost) {
  const std::string image = busybox_image();
  if (image.empty()) GTEST_SKIP() << "no /bin/busybox (Debian package busybox-static)";
  auto s = make(image);
  const ExecResult r = sh(*s, "ls / | wc -l; ls /usr 2>&1; echo $0");
  EXPECT_EQ(r.exit_code, 0) << r.stderr_data;
  EXPECT_NE(r.stdout_data.find("No such file"), std::string::npos)
      << "no host /usr: " << r.stdout_data;
}

TEST_F(SandboxTest, DestroyLeavesNoProcessMountCgroupOrFile) {
  auto s = make();
  const std::string cgroup = "k3lab-" + s->id();
  EXPECT_EQ(count_agent_processes(), agents_before_ + 1);
  s->destroy();
  s->destroy();  // idempotent
  EXPECT_EQ(count_agent_processes(), agents_before_);
  EXPECT_EQ(count_cgroups_named(cgroup), 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/store/run"));
  EXPECT_THROW(sh(*s, "true"), Error);
}

TEST_F(SandboxTest, CommandsOfASandboxEndWithIt) {
  auto s = make();
  // A background process outlives its shell only until the command ends.
  const ExecResult r = sh(*s, "sleep 100 & echo started");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, "started\n");
  EXPECT_LT(r.wall_ms, 5000u);
  EXPECT_EQ(sh(*s, "ps -e -o comm= | grep -c sleep").stdout_data, "0\n");
}

}  // namespace
}  // namespace k3::sandbox::testing
