// Reuse of namespace sandboxes: a reset sandbox's next user finds nothing of the one before
// (files anywhere, processes, IPC objects, outputs), a sandbox that hit a limit or a timeout or
// changed its image's files is destroyed instead, and nothing is left once the pool is gone.
#include <gtest/gtest.h>

#include <set>

#include "fixture.h"
#include "k3/base/error.h"
#include "k3/sandbox/pool.h"

namespace k3::sandbox::testing {
namespace {

// What a first user leaves behind, everywhere it can write: the root, /tmp, /dev and /dev/shm,
// a directory it made unreadable, a fifo, a symlink, System V IPC objects, and processes that
// try to outlive their command.
const char* kFirstUser =
    "echo first-output > /tmp/out.txt; echo root-file > /at-root; mkdir -p /tmp/d/e;"
    "echo deep > /tmp/d/e/f; chmod 000 /tmp/d; mkfifo /tmp/fifo; ln -s /tmp/out.txt /tmp/link;"
    "echo shm > /dev/shm/left; echo dev > /dev/left; ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null;"
    "ipcmk -S 2 >/dev/null; setsid sleep 1000 & (sleep 1000 &); echo done";

// What the next user looks for; prints nothing when the sandbox is clean.
const char* kNextUser =
    "ls -A /tmp /dev/shm; ls /at-root /dev/left 2>/dev/null; cat /tmp/out.txt 2>/dev/null;"
    "ipcs -m -q -s | grep -E '^0x' ; ps -e -o comm= | grep sleep";

TEST_F(SandboxTest, ASecondUserOfAResetSandboxFindsNothingOfTheFirst) {
  Pool pool(*backend_, store_->resolve("host"), Limits{}, 1, 1);
  pool.wait_until_full();
  auto first = pool.acquire();
  const std::string id = first->id();
  ASSERT_EQ(sh(*first, kFirstUser).stdout_data, "done\n");
  first->put("/tmp/put-secret", "mine");
  EXPECT_EQ(sh(*first, "ls /tmp | wc -l").stdout_data, "5\n") << "the first user's files are there";
  pool.release(std::move(first));
  pool.wait_until_full();
  auto second = pool.acquire();
  ASSERT_EQ(second->id(), id) << "the sandbox was reused";
  EXPECT_EQ(second->resets(), 1u);
  const ExecResult r = sh(*second, kNextUser);
  EXPECT_EQ(r.stdout_data, "/dev/shm:\n\n/tmp:\n") << r.stderr_data;
  EXPECT_THROW(second->get("/tmp/put-secret"), Error);
  EXPECT_THROW(second->get("/tmp/out.txt"), Error);
  // The root holds what a new sandbox's does, and nothing else.
  EXPECT_EQ(sh(*second, "ls -A /").stdout_data, sh(*make(), "ls -A /").stdout_data);
  EXPECT_EQ(sh(*second, "echo $((6*7))").stdout_data, "42\n") << "and it works";
}

// What commands inherit from their own process (rlimits, nice, scheduling policy, affinity, I/O
// priority), what they see of the agent's (PID 1), and /dev: its links and extended attributes.
const char* kCommandSettings =
    "cat /proc/self/limits; cut -d' ' -f18,19,40,41 /proc/self/stat;"
    "grep Cpus_allowed_list /proc/self/status; ionice";
const char* kAgentSettings =
    "cat /proc/1/limits; cut -d' ' -f18,19,40,41 /proc/1/stat;"
    "grep Cpus_allowed_list /proc/1/status; ionice -p 1";
const char* kDevView =
    "readlink /dev/stdin /dev/stdout /dev/stderr /dev/fd /dev/core /dev/ptmx; python3 -c \"import "
    "os; print([(p, os.listxattr(p)) for p in ('/dev', '/dev/shm', '/dev/null')])\"";

// A first user changes every setting of the agent it can change and the agent can still restore:
// each rlimit's soft value (one of them a value channel), the CPU affinity, the scheduling policy
// and the I/O priority; and tries /dev's links and extended attributes.
const char* kChangeTheAgent = R"(python3 - <<'END'
import os, resource
for r in range(16):  # every RLIMIT_*
    soft, hard = resource.prlimit(1, r)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 40
    elif soft > 0:
        soft -= 1
    elif hard != 0:
        soft = 1
    resource.prlimit(1, r, (soft, hard))
os.sched_setaffinity(1, {min(os.sched_getaffinity(1))})
os.sched_setscheduler(1, os.SCHED_BATCH, os.sched_param(0))
os.system("ionice -c 3 -p 1")
open("/dev/shm/kept", "w").write("x")
for path in ("/dev", "/dev/shm", "/dev/shm/kept"):
    try:
        os.setxattr(path, "user.left", b"for the next user")
    except OSError as e:
        print("xattr", path, e.strerror)
for link in ("/dev/stderr", "/dev/core"):
    try:
        os.unlink(link)
        os.symlink("/tmp/mine", link)
    except OSError as e:
        print("link", link, e.strerror)
END
)";

TEST_F(SandboxTest, ResetRestoresWhatCommandsInheritFromTheAgentAndDev) {
  auto fresh = make();
  const std::string command = sh(*fresh, kCommandSettings).stdout_data;
  const std::string agent = sh(*fresh, kAgentSettings).stdout_data;
  const std::string dev = sh(*fresh, kDevView).stdout_data;
  ASSERT_NE(command.find("Max msgqueue size"), std::string::npos) << command;
  auto s = make();
  const ExecResult change = sh(*s, kChangeTheAgent);
  ASSERT_EQ(change.exit_code, 0) << change.stderr_data;
  // /dev is read-only; /dev/shm is the user's.
  EXPECT_EQ(change.stdout_data,
            "xattr /dev Read-only file system\nlink /dev/stderr Read-only file system\n"
            "link /dev/core Read-only file system\n");
  EXPECT_NE(sh(*s, kAgentSettings).stdout_data, agent) << "the agent's settings changed";
  EXPECT_EQ(sh(*s, kCommandSettings).stdout_data, command) << "but commands start from the fresh";
  ASSERT_TRUE(s->reset());
  EXPECT_EQ(sh(*s, kCommandSettings).stdout_data, command);
  EXPECT_EQ(sh(*s, kAgentSettings).stdout_data, agent);
  EXPECT_EQ(sh(*s, kDevView).stdout_data, dev);
}

// What an unprivileged agent cannot undo (a lowered hard limit, a higher nice value, the idle
// scheduling policy) makes the reset refuse: the sandbox is destroyed, never handed on.
TEST_F(SandboxTest, ResetRefusesAgentSettingsItCannotRestore) {
  for (const char* change :
       {"prlimit --pid 1 --msgqueue=1000:1000", "renice -n 5 -p 1", "chrt -i -p 0 1"}) {
    auto s = make();
    const ExecResult r = sh(*s, change);
    ASSERT_EQ(r.exit_code, 0) << change << ": " << r.stderr_data;
    EXPECT_FALSE(s->reset()) << change;
  }
}

TEST_F(SandboxTest, ResetOfALayeredImageRemovesNewFilesAndRefusesChangedOnes) {
  const std::string image = busybox_image();
  if (image.empty()) GTEST_SKIP() << "no /bin/busybox (Debian package busybox-static)";
  auto s = make(image);
  // New files, also in a directory of the image (which the overlay copies up).
  ASSERT_EQ(sh(*s, "echo x > /bin/new && echo y > /tmp/t && mkdir /made && echo ok").stdout_data,
            "ok\n");
  ASSERT_TRUE(s->reset());
  EXPECT_EQ(sh(*s, "ls /bin/new /tmp/t /made 2>&1 | grep -c 'No such'").stdout_data, "3\n");
  EXPECT_EQ(sh(*s, "ls /bin | wc -l").stdout_data, "20\n") << "the image's files are all there";
  // A file of the image changed or removed cannot be undone from inside: no reset.
  for (const char* change :
       {"touch /bin/busybox", "ln -sf busybox /bin/ls", "rm /bin/sleep", "chmod 700 /bin"}) {
    auto t = make(image);
    const ExecResult r = sh(*t, change);
    ASSERT_EQ(r.exit_code, 0) << change << ": " << r.stderr_data;
    EXPECT_FALSE(t->reset()) << change;
  }
}

// An extended attribute of an image's directory given another value (the overlay copies the
// directory up, with the same names) cannot be undone by removing: no reset.
TEST_F(SandboxTest, ResetRefusesAnImageDirectoryWhoseXattrValueChanged) {
  const char* set_xattr =
      "python3 -c \"import os, sys; os.makedirs('/data', exist_ok=True); "
      "os.setxattr('/data', 'user.k3', sys.argv[1].encode())\" ";
  auto base = make();
  ASSERT_EQ(sh(*base, std::string(set_xattr) + "image").exit_code, 0);
  const std::string image = base->snapshot("with-xattr");
  auto same = make(image);
  ASSERT_EQ(sh(*same, std::string(set_xattr) + "image").exit_code, 0);
  EXPECT_TRUE(same->reset()) << "the same value: nothing to undo";
  auto changed = make(image);
  ASSERT_EQ(sh(*changed, std::string(set_xattr) + "mine").exit_code, 0);
  EXPECT_FALSE(changed->reset());
}

// A command that timed out, or hit the pids or memory limit, leaves a sandbox that is destroyed
// rather than reset; one whose command failed of its own (its rlimits) is reset.
TEST_F(SandboxTest, SandboxesThatHitALimitOrATimeoutAreNotReset) {
  Limits small;
  small.memory_bytes = 128ull << 20;
  small.processes = 64;
  small.timeout_s = 5;
  ExecRequest timeout;
  timeout.argv = {"/bin/sleep", "10"};
  timeout.timeout_ms = 300;
  auto a = make("host", small);
  EXPECT_TRUE(a->exec(timeout).timed_out);
  EXPECT_FALSE(a->reset()) << "timed out";
  auto b = make("host", small);
  sh(*b, "bomb() { bomb | bomb & }; bomb; sleep 2");
  EXPECT_FALSE(b->reset()) << "fork bomb";
  auto c = make("host", small);
  sh(*c,
     "for i in 1 2 3 4; do python3 -c 'x = b\"x\" * (60 << 20); import time; time.sleep(3)' & "
     "done; wait");
  EXPECT_FALSE(c->reset()) << "memory bomb (the cgroup's OOM killer)";
  auto d = make("host", small);
  EXPECT_NE(sh(*d, "python3 -c 'x = bytearray(1 << 30)'").exit_code, 0);
  EXPECT_TRUE(d->reset()) << "one process refused memory by its own rlimit";
  EXPECT_EQ(sh(*d, "ps -e -o comm= | grep -c python3").stdout_data, "0\n");
}

// In a pool: the same, and a sandbox serves at most MAX_USES users.
TEST_F(SandboxTest, PoolDestroysTaintedSandboxesAndCapsUses) {
  Pool pool(*backend_, store_->resolve("host"), Limits{}, 1, 1, /*max_uses=*/3);
  pool.wait_until_full();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    auto s = pool.acquire();
    ids.push_back(s->id());
    EXPECT_EQ(sh(*s, "echo use").stdout_data, "use\n");
    pool.release(std::move(s));
    pool.wait_until_full();
  }
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[2], ids[0]);
  EXPECT_NE(ids[3], ids[0]) << "destroyed after 3 uses";
  EXPECT_EQ(pool.reused(), 3u);  // twice the first, once the second
  auto s = pool.acquire();
  const std::string tainted = s->id();
  ExecRequest q;
  q.argv = {"/bin/sleep", "10"};
  q.timeout_ms = 200;
  EXPECT_TRUE(s->exec(q).timed_out);
  pool.release(std::move(s));
  pool.wait_until_full();
  EXPECT_NE(pool.acquire()->id(), tainted);
  EXPECT_EQ(pool.reused(), 3u);
}

// Many resets, then the pool goes: no process, mount, cgroup or run directory is left (the
// fixture checks the first two and the run directories).
TEST_F(SandboxTest, NothingOfAReusingPoolOutlivesIt) {
  std::set<std::string> ids;
  {
    Pool pool(*backend_, store_->resolve("host"), Limits{}, 2, 2);
    pool.wait_until_full();
    for (int i = 0; i < 20; ++i) {
      auto s = pool.acquire();
      ids.insert(s->id());
      sh(*s, "echo x > /tmp/x; sleep 100 & echo");
      pool.release(std::move(s));
    }
    pool.wait_until_full();
    EXPECT_GT(pool.reused(), 10u);
  }
  // (How many distinct sandboxes served the 20 users depends on how fast resets run beside
  // acquires: a busy host makes misses; only what is left over is checked.)
  for (const auto& id : ids) EXPECT_EQ(count_cgroups_named("k3lab-" + id), 0) << id;
}

}  // namespace
}  // namespace k3::sandbox::testing
