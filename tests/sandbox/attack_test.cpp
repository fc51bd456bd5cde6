// The attack suite for the namespaces backend: each case is something an agent's code might try,
// and each must stay inside its sandbox, leave the host untouched, and leave k3lab working. Every
// case runs twice: on new sandboxes, and on reused ones (reset after a first user who left what it
// could behind).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <regex>
#include <thread>

#include "fixture.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"

namespace k3::sandbox::testing {
namespace {

class Attack : public SandboxTest, public ::testing::WithParamInterface<bool> {
 protected:
  // A new sandbox, or (for the "Reused" cases) one reset after a first user.
  std::unique_ptr<Sandbox> make(const std::string& image = "host", Limits limits = {}) {
    auto s = SandboxTest::make(image, limits);
    if (!GetParam()) return s;
    const ExecResult first = sh(*s,
                                "echo first > /tmp/first; mkdir -p /tmp/d; echo x > /dev/shm/x;"
                                "ipcmk -M 4096 >/dev/null; setsid sleep 100 & echo started");
    if (first.stdout_data != "started\n" || !s->reset())
      throw Error("the first user's sandbox was not reset: " + first.stderr_data);
    EXPECT_EQ(sh(*s, "ls -A /tmp /dev/shm; ps -e -o comm= | grep -c sleep").stdout_data,
              "/dev/shm:\n\n/tmp:\n0\n");
    return s;
  }
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    secret_ = dir_ + "/host-secret";
    std::ofstream(secret_) << "host secret\n";
  }
  void TearDown() override {
    if (!secret_.empty()) {
      EXPECT_EQ(read_file(secret_), "host secret\n") << "a host file changed";
    }
    SandboxTest::TearDown();
  }
  // A small sandbox, quick to fill.
  static Limits small() {
    Limits l;
    l.memory_bytes = 128ull << 20;
    l.processes = 64;
    l.disk_bytes = 16ull << 20;
    l.file_size_bytes = 64ull << 20;
    l.timeout_s = 5;
    l.output_bytes = 64 << 10;
    return l;
  }
  // The last line of TEXT (without its newline).
  static std::string last_line(const std::string& text) {
    const size_t end = text.size() && text.back() == '\n' ? text.size() - 1 : text.size();
    const size_t start = text.rfind('\n', end ? end - 1 : 0);
    return text.substr(start == std::string::npos ? 0 : start + 1,
                       end - (start == std::string::npos ? 0 : start + 1));
  }
  // None of the markers an escape would print is in OUTPUT.
  static void expect_none_of(const std::string& output,
                             std::initializer_list<const char*> markers) {
    for (const char* bad : markers)
      EXPECT_EQ(output.find(bad), std::string::npos) << bad << " in " << output;
  }
  // The sandbox still runs commands after an attack.
  static void expect_usable(Sandbox& s) { EXPECT_EQ(sh(s, "echo alive").stdout_data, "alive\n"); }
  std::string secret_;
};

TEST_P(Attack, ReadingHostFilesOutsideTheImage) {
  auto s = make();
  const ExecResult r = sh(*s, "cat " + secret_ + " /etc/shadow /etc/passwd /root/.bashrc 2>&1");
  EXPECT_EQ(r.stdout_data.find("host secret"), std::string::npos);
  EXPECT_EQ(r.stdout_data.find("root:"), std::string::npos);
  // The root holds the host's system directories, the sandbox's own mounts, and nothing else.
  const std::set<std::string> allowed = {"usr",    "bin",  "sbin", "lib", "lib32",       "lib64",
                                         "libx32", "proc", "dev",  "tmp", ".k3lab-agent"};
  const ExecResult ls = sh(*s, "ls -A /");
  std::istringstream names(ls.stdout_data);
  for (std::string name; names >> name;)
    EXPECT_TRUE(allowed.count(name)) << "/" << name << " is visible";
  EXPECT_THROW(s->get(secret_), Error);
  EXPECT_THROW(s->get("/etc/hostname"), Error);
}

TEST_P(Attack, SymlinksAndDotDotInFileTransfers) {
  auto s = make();
  // `..` cannot climb above the sandbox's root: this lands inside it.
  s->put("/../../.." + dir_ + "/escaped", "x");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/escaped"));
  EXPECT_EQ(s->get(dir_ + "/escaped"), "x");
  // A symlink to a host path resolves inside the sandbox, where that path is not the host's.
  ASSERT_EQ(sh(*s, "ln -s " + secret_ + " /tmp/link && ln -s " + dir_ + " /tmp/dirlink").exit_code,
            0);
  EXPECT_THROW(s->get("/tmp/link"), Error);
  EXPECT_THROW(s->put("/tmp/link", "overwritten"), Error) << "put never follows a final symlink";
  s->put("/tmp/dirlink/planted", "y");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/planted"));
}

TEST_P(Attack, ProcAndSysTricks) {
  auto s = make();
  const ExecResult r = sh(*s,
                          "ls /sys 2>/dev/null && echo SYS-VISIBLE;"
                          "echo b > /proc/sysrq-trigger 2>/dev/null && echo SYSRQ;"
                          "echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo SYSCTL;"
                          "head -c 1 /proc/kcore >/dev/null 2>&1 && echo KCORE;"
                          "ls /proc/1/root/etc >/dev/null 2>&1 && echo HOST-ROOT;"
                          "ls /proc | grep -c '^[0-9]'");
  expect_none_of(r.stdout_data, {"SYS-VISIBLE", "SYSRQ", "SYSCTL", "KCORE", "HOST-ROOT"});
  // Only the sandbox's own few processes (the agent, this shell, ls and grep).
  EXPECT_LE(std::stoi(last_line(r.stdout_data)), 6);
}

TEST_P(Attack, NetworkAccess) {
  // A listener on the host's loopback: the sandbox has a loopback of its own and no other link.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  auto s = make();
  const ExecResult r = sh(*s,
                          "python3 -c \"import socket; s=socket.socket(); s.settimeout(2);"
                          "s.connect(('127.0.0.1', " +
                              std::to_string(port) +
                              ")); print('CONNECTED')\" 2>&1;"
                              "tail -n +3 /proc/net/dev | cut -d: -f1");
  close(listener);
  EXPECT_EQ(r.stdout_data.find("CONNECTED"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("refused"), std::string::npos) << r.stdout_data;
  EXPECT_EQ(last_line(r.stdout_data), "    lo");
}

TEST_P(Attack, TestsTargetOnlyLoopbackAddresses) {
  // The rule for this suite itself: no test sends anything anywhere but to a loopback address.
  const std::regex ipv4(R"(\b(\d{1,3})\.\d{1,3}\.\d{1,3}\.\d{1,3}\b)");
  for (const auto& e : std::filesystem::directory_iterator(K3LAB_SOURCE_DIR "/tests/sandbox")) {
    const std::string text = read_file(e.path().string());
    for (std::sregex_iterator m(text.begin(), text.end(), ipv4), end; m != end; ++m)
      EXPECT_EQ((*m)[1].str(), "127") << e.path() << " names " << m->str();
  }
}

// Each call denied by the filter fails with EPERM (without it, most would fail otherwise).
TEST_P(Attack, DeniedSystemCalls) {
  auto s = make();
  const std::string probe = R"(
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {'ptrace': 101, 'mount': 165, 'umount2': 166, 'kexec_load': 246, 'bpf': 321,
         'perf_event_open': 298, 'init_module': 175, 'finit_module': 313, 'delete_module': 176,
         'keyctl': 250, 'add_key': 248, 'userfaultfd': 323, 'unshare': 272, 'setns': 308,
         'io_uring_setup': 425, 'chroot': 161, 'pivot_root': 155, 'reboot': 169, 'mq_open': 240}
for name, nr in sorted(calls.items()):
    ctypes.set_errno(0)
    rc = libc.syscall(nr, 0, 0, 0, 0, 0)
    print(name, rc, os.strerror(ctypes.get_errno()) if rc == -1 else 'succeeded')
)";
  s->put("/tmp/probe.py", probe);
  const ExecResult r = sh(*s, "python3 /tmp/probe.py");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_data;
  std::istringstream lines(r.stdout_data);
  int checked = 0;
  for (std::string line; std::getline(lines, line); ++checked)
    EXPECT_NE(line.find(" -1 Operation not permitted"), std::string::npos) << line;
  EXPECT_EQ(checked, 19);
}

TEST_P(Attack, PtraceAndSignalsToAnotherSandboxOrTheHost) {
  auto a = make();
  auto b = make();
  // A host process that must survive; the sandbox sees neither it nor the other sandbox.
  const pid_t host_child = fork();
  if (host_child == 0) {
    pause();
    _exit(0);
  }
  const ExecResult r = sh(*a, "kill -9 " + std::to_string(host_child) + " 2>&1; kill -9 " +
                                  std::to_string(getpid()) + " 2>&1; echo done");
  EXPECT_NE(r.stdout_data.find("No such process"), std::string::npos) << r.stdout_data;
  // kill -1: every process the sender may signal, which is only its own sandbox's (its agent
  // survives or not, depending on the backend), and nothing else.
  try {
    sh(*a, "kill -9 -1; sleep 5");
  } catch (const Error&) {
  }
  EXPECT_EQ(waitpid(host_child, nullptr, WNOHANG), 0) << "a host process was killed";
  kill(host_child, SIGKILL);
  waitpid(host_child, nullptr, 0);
  expect_usable(*b);
}

TEST_P(Attack, MountsDevicesAndSetuid) {
  auto s = make();
  const ExecResult r = sh(*s,
                          "mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED;"
                          "unshare -U -r true 2>/dev/null && echo UNSHARED;"
                          "mknod /tmp/disk b 8 0 2>/dev/null && echo MKNOD;"
                          "find /dev -type b | grep -q . && echo BLOCKDEV;"
                          "grep NoNewPrivs /proc/self/status;"
                          "python3 -c 'import os; os.setuid(0)' 2>/dev/null && echo SETUID;"
                          "su -c id root </dev/null 2>/dev/null | grep -q uid=0 && echo ROOT;"
                          "id -u");
  expect_none_of(r.stdout_data, {"MOUNTED", "UNSHARED", "MKNOD", "BLOCKDEV", "SETUID", "ROOT"});
  EXPECT_NE(r.stdout_data.find("NoNewPrivs:\t1"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("1000\n"), std::string::npos);
}

TEST_P(Attack, ForkBomb) {
  auto s = make("host", small());
  ExecRequest q;
  q.argv = {"/bin/sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 3"};
  q.timeout_ms = 3000;
  const ExecResult r = s->exec(q);
  EXPECT_LT(r.wall_ms, 10000u);
  expect_usable(*s);
  // Nothing of the bomb is left: the agent (PID 1), and this sh, ls and grep (if grep started
  // before ls read /proc).
  EXPECT_LE(std::stoi(sh(*s, "ls /proc | grep -c '^[0-9]'").stdout_data), 4);
}

TEST_P(Attack, MemoryBomb) {
  auto s = make("host", small());
  const ExecResult r = sh(*s, "python3 -c 'x = bytearray(1 << 30); print(len(x))'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_data, "");
  expect_usable(*s);
}

TEST_P(Attack, DiskFillBomb) {
  auto s = make("host", small());
  // /dev/shm is on the writable layer's tmpfs: both fill the one disk limit. /dev is read-only.
  const ExecResult r = sh(*s,
                          "for d in /tmp /dev/shm; do dd if=/dev/zero of=$d/fill bs=1M count=100 "
                          "2>&1 | grep -o 'No space left'; done; (echo x > /dev/fill) 2>&1;"
                          "du -cb /tmp/fill /dev/shm/fill | tail -n 1 | cut -f 1");
  EXPECT_EQ(r.stdout_data.rfind("No space left\nNo space left\n", 0), 0u) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("Read-only file system"), std::string::npos) << r.stdout_data;
  const uint64_t size = std::stoull(last_line(r.stdout_data));
  EXPECT_LE(size, 16ull << 20);
  expect_usable(*s);
  // File size, per file: RLIMIT_FSIZE.
  Limits l = small();
  l.file_size_bytes = 1 << 20;
  auto t = make("host", l);
  EXPECT_NE(sh(*t, "head -c 2000000 /dev/zero > /tmp/f").exit_code, 0);
  EXPECT_EQ(sh(*t, "stat -c %s /tmp/f").stdout_data, "1048576\n");
}

TEST_P(Attack, HugeOutput) {
  auto s = make("host", small());
  ExecRequest q;
  q.argv = {"yes"};
  q.timeout_ms = 1000;
  const ExecResult r = s->exec(q);
  EXPECT_TRUE(r.timed_out);
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.stdout_data.size(), 64u << 10);
  const ExecResult finite = sh(*s, "head -c 5000000 /dev/zero; echo done >&2");
  EXPECT_EQ(finite.exit_code, 0);
  EXPECT_TRUE(finite.stdout_truncated);
  EXPECT_EQ(finite.stdout_data.size(), 64u << 10);
  EXPECT_EQ(finite.stderr_data, "done\n");
}

TEST_P(Attack, SleepingPastTheTimeoutKillsTheWholeTree) {
  auto s = make("host", small());
  ExecRequest q;
  q.argv = {"/bin/sh", "-c", "setsid sleep 100 & (sleep 100 &) ; sleep 100"};
  q.timeout_ms = 500;
  const ExecResult r = s->exec(q);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LT(r.wall_ms, 5000u);
  EXPECT_EQ(sh(*s, "ps -e -o comm= | grep -c sleep").stdout_data, "0\n");
}

TEST_P(Attack, DestroyDuringACommandLeavesNothing) {
  auto s = make();
  std::thread running([&] {
    try {
      sh(*s, "sleep 100 & sleep 100");
    } catch (const Error&) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s->destroy();  // kills the sandbox under the running command, which then fails
  running.join();
  EXPECT_FALSE(s->alive());
}

TEST_P(Attack, ASecondSandboxCannotReadTheFirstsFiles) {
  auto a = make();
  auto b = make();
  a->put("/tmp/a-secret", "mine");
  EXPECT_THROW(b->get("/tmp/a-secret"), Error);
  EXPECT_EQ(sh(*b, "find / -xdev -name a-secret 2>/dev/null").stdout_data, "");
}

// The agent (PID 1) runs as the commands' user: its memory, descriptors (the channel to k3lab,
// where a forged reply would reach the next user) and environment must be out of their reach.
TEST_P(Attack, ReachingIntoTheAgent) {
  auto s = make();
  const ExecResult r = sh(*s,
                          "ls /proc/1/fd >/dev/null 2>&1 && echo FDS;"
                          "for fd in 1 11 12 13; do echo junk > /proc/1/fd/$fd 2>/dev/null && "
                          "echo WROTE; done;"
                          "head -c 1 /proc/1/mem >/dev/null 2>&1 && echo MEM;"
                          "cat /proc/1/environ >/dev/null 2>&1 && echo ENV;"
                          "cat /proc/1/maps >/dev/null 2>&1 && echo MAPS; echo checked");
  expect_none_of(r.stdout_data, {"FDS", "WROTE", "MEM", "ENV", "MAPS"});
  EXPECT_EQ(last_line(r.stdout_data), "checked");
  EXPECT_TRUE(s->reset());
  expect_usable(*s);
}

// What a user leaves in every directory it can write is gone for the next one; the permissions
// and extended attributes of the start's own directories are restored; what a reset cannot
// restore (the start's own entries replaced) makes it refuse, so the sandbox is destroyed.
TEST_P(Attack, LeavingSomethingForTheNextUser) {
  auto s = make();
  const ExecResult left = sh(*s,
                             "for d in $(find / /dev /dev/shm -xdev -type d -writable 2>/dev/null);"
                             "do echo x > $d/.left && echo $d; done");
  EXPECT_NE(left.stdout_data.find("/tmp\n"), std::string::npos) << left.stdout_data;
  EXPECT_NE(left.stdout_data.find("/dev/shm\n"), std::string::npos) << left.stdout_data;
  ASSERT_TRUE(s->reset());
  EXPECT_EQ(sh(*s, "find / /dev /dev/shm -xdev -name .left 2>/dev/null").stdout_data, "");
  const char* kept_dirs =
      "stat -c '%n %a %u' / /tmp /dev/shm; python3 -c \"import os; "
      "print([os.listxattr(p) for p in ('/', '/tmp', '/dev/shm')])\"";
  const std::string fresh = sh(*SandboxTest::make(), kept_dirs).stdout_data;
  for (const char* change :
       {"chmod 700 /tmp", "chmod 777 /dev/shm", "chmod 700 /",
        "python3 -c \"import os; [os.setxattr(p, 'user.left', b'x') for p in ('/', '/tmp', "
        "'/dev/shm')]\""}) {
    auto t = make();
    const ExecResult r = sh(*t, change);
    ASSERT_EQ(r.exit_code, 0) << change << ": " << r.stderr_data;
    EXPECT_TRUE(t->reset()) << change;
    EXPECT_EQ(sh(*t, kept_dirs).stdout_data, fresh) << change;
  }
  for (const char* change : {"ln -sfn /tmp /lib32", "rmdir /tmp && mkdir -m 1777 /tmp"}) {
    auto t = make();
    const ExecResult r = sh(*t, change);
    ASSERT_EQ(r.exit_code, 0) << change << ": " << r.stderr_data;
    EXPECT_FALSE(t->reset()) << change;
  }
}

INSTANTIATE_TEST_SUITE_P(Sandbox, Attack, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Reused" : "New"; });

}  // namespace
}  // namespace k3::sandbox::testing
