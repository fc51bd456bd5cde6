// Sandbox start latency and throughput (docs/sandbox.md). Namespaces backend: create -> exec
// `true` -> destroy, cold and from the pool; exec alone in a live sandbox; sandboxes per second
// sustained; memory per idle sandbox; beside bubblewrap alone and crun on the same files (the
// host's /usr read-only), measured in one run. MicroVM backend (where it can run), on a busybox
// image: the same rows, microVMs per second, and many idle guests alive at once.
//
//   build/release/bench/bench_sandbox [--iterations 100] [--seconds 5] [--idle 50] [--threads 4]
//       [--vm-iterations 20] [--vm-idle 8] [--backends namespaces,microvm]
// Run as root (the overlays and cgroups).
#include "k3/sandbox/sandbox.h"

#include <dirent.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "flags.h"
#include "k3/sandbox/host_process.h"
#include "k3/sandbox/namespaces_backend.h"
#include "k3/sandbox/pool.h"

namespace fs = std::filesystem;
using namespace k3::sandbox;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  int iterations, seconds, idle, threads, vm_iterations, vm_idle;
};

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

void row(const char* what, const std::vector<double>& ms) {
  std::fflush(stdout);
  std::printf("| %-44s | %8.2f | %8.2f | %5zu |\n", what, percentile(ms, 0.5), percentile(ms, 0.99),
              ms.size());
}

std::vector<double> repeat(int n, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t = Clock::now();
    f();
    ms.push_back(ms_since(t));
  }
  return ms;
}

// Runs ARGV and waits; throws if it fails.
void spawn_and_wait(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0)
    throw std::runtime_error("cannot start " + argv[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error(argv[0] + " failed");
}

// The processes below this one: their proportional and resident set sizes (kB), and of QEMU's the
// resident part of the guest's RAM (each one's largest mapping): what a guest's kernel touched,
// the same under KVM as under software emulation, whose translation cache adds to QEMU's own.
struct Memory {
  uint64_t pss_kb = 0, rss_kb = 0, guest_ram_kb = 0;
};

uint64_t largest_mapping_rss_kb(const fs::path& proc) {
  std::ifstream smaps(proc / "smaps");
  uint64_t largest = 0, rss_of_largest = 0, size = 0;
  for (std::string line; std::getline(smaps, line);) {
    uint64_t begin = 0, end = 0, kb = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {
      size = end - begin;
    } else if (std::sscanf(line.c_str(), "Rss: %lu kB", &kb) == 1 && size > largest) {
      largest = size;
      rss_of_largest = kb;
    }
  }
  return rss_of_largest;
}

Memory children_memory() {
  Memory total;
  const pid_t self = getpid();
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || std::stoi(pid) == self)
      continue;
    // Is SELF an ancestor? Walk the parents.
    int p = std::stoi(pid);
    bool mine = false;
    for (int depth = 0; depth < 8 && p > 1; ++depth) {
      std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
      std::string line;
      std::getline(stat, line);
      const size_t close = line.rfind(')');
      if (close == std::string::npos) break;
      int ppid = 0;
      char state = 0;
      std::sscanf(line.c_str() + close + 2, "%c %d", &state, &ppid);
      if (ppid == self) {
        mine = true;
        break;
      }
      p = ppid;
    }
    if (!mine) continue;
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("qemu-system", 0) == 0) total.guest_ram_kb += largest_mapping_rss_kb(e.path());
    std::ifstream rollup(e.path() / "smaps_rollup");
    for (std::string key; rollup >> key;) {
      uint64_t kb = 0;
      if (key == "Rss:" && rollup >> kb) total.rss_kb += kb;
      if (key == "Pss:" && rollup >> kb) total.pss_kb += kb;
    }
  }
  return total;
}

uint64_t mem_available_kb() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoull(line.substr(13));
  return 0;
}

// The bubblewrap command of a namespaces sandbox, without k3lab: same namespaces and host binds,
// on bubblewrap's own tmpfs root, running /bin/true.
std::vector<std::string> bwrap_alone(const std::string& bwrap) {
  std::vector<std::string> a = bwrap_isolation_flags(bwrap);
  add_host_system(a, nullptr);
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--", "/bin/true"});
  return a;
}

// An OCI bundle for crun with the same files: an empty read-only root, the host's /usr bound
// read-only, the same symlinks. Returns "" if crun cannot run here.
std::string crun_bundle(const std::string& dir) {
  const std::string crun = find_program("crun");
  if (crun.empty()) return "";
  fs::create_directories(dir + "/rootfs/usr");
  for (const char* link : {"bin", "sbin", "lib", "lib64"}) {
    if (fs::is_symlink(std::string("/") + link))
      fs::create_symlink(fs::read_symlink(std::string("/") + link), dir + "/rootfs/" + link);
  }
  run_program({crun, "spec", "--bundle", dir});
  // Patch the generated config: no terminal, /bin/true, the /usr bind, a read-only root.
  run_program({"/usr/bin/python3", "-c",
               "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p));"
               "c['process']['terminal']=False; c['process']['args']=['/bin/true'];"
               "c['root']={'path':'rootfs','readonly':True};"
               "c['mounts'].append({'destination':'/usr','type':'bind','source':'/"
               "usr','options':['rbind','ro']});"
               "json.dump(c,open(p,'w'))",
               dir});
  // crun refuses a hybrid cgroup layout (v1 controllers beside a v2 tree that has one): in this
  // process's own mount namespace, hide the v2 tree.
  if (unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0)
    umount2("/sys/fs/cgroup/unified", MNT_DETACH);
  return crun;
}

// SECONDS of THREADS clients each doing create + exec `true` + destroy: sandboxes per second.
// With POOL, each takes its sandbox from the pool and releases it to be reset (or destroyed).
double sustained_rate(Backend& backend, const Image& image, const Limits& limits, int threads,
                      int seconds, Pool* pool = nullptr) {
  ExecRequest t;
  t.argv = {"/bin/true"};
  std::atomic<int> done{0};
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      while (Clock::now() < end) {
        auto s = pool ? pool->acquire() : backend.create(image, limits);
        s->exec(t);
        if (pool) {
          pool->release(std::move(s));
        } else {
          s->destroy();
        }
        ++done;
      }
    });
  }
  for (auto& w : workers) w.join();
  return done.load() / double(seconds);
}

// The sustained rate from a pool that resets released sandboxes for their next user, with what
// the pool did meanwhile.
void sustained_pool_row(Backend& backend, const Image& image, const Limits& limits,
                        const Options& o, const char* what) {
  Pool pool(backend, image, limits, /*warm=*/size_t(2 * o.threads), 2);
  pool.wait_until_full();
  const double rate = sustained_rate(backend, image, limits, o.threads, o.seconds, &pool);
  std::printf(
      "sustained, %d clients, pool with reuse: %.1f %s/s (acquire + exec + release; %zu "
      "hits, %zu misses, %zu reused, at most %zu uses each)\n",
      o.threads, rate, what, pool.hits(), pool.misses(), pool.reused(), Pool::kDefaultMaxUses);
}

// COUNT idle sandboxes alive at once: each one's share of the processes' PSS and RSS and of the
// fall in MemAvailable (which includes the kernel's side). Started by THREADS threads; each must
// answer an exec of `true` before the figures are taken.
void idle_memory(Backend& backend, const Image& image, const Limits& limits, int count, int threads,
                 const char* what) {
  ExecRequest t;
  t.argv = {"/bin/true"};
  const Memory before = children_memory();
  const uint64_t avail_before = mem_available_kb();
  std::vector<std::unique_ptr<Sandbox>> idle(static_cast<size_t>(count));
  std::atomic<int> answered{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> starters;
  for (int k = 0; k < threads; ++k) {
    starters.emplace_back([&, k] {
      for (int i = k; i < count; i += threads) {
        idle[size_t(i)] = backend.create(image, limits);
        answered += idle[size_t(i)]->exec(t).exit_code == 0;
      }
    });
  }
  for (auto& s : starters) s.join();
  const double start_s = ms_since(t0) / 1000;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const Memory after = children_memory();
  const uint64_t avail_after = mem_available_kb();
  std::printf(
      "%d idle %s alive at once (started by %d threads in %.2f s, %d answered): each PSS %.2f "
      "MiB, RSS %.2f MiB; MemAvailable fell %.2f MiB each\n",
      count, what, threads, start_s, answered.load(),
      (double(after.pss_kb) - double(before.pss_kb)) / 1024.0 / count,
      (double(after.rss_kb) - double(before.rss_kb)) / 1024.0 / count,
      (double(avail_before) - double(avail_after)) / 1024.0 / count);
  if (after.guest_ram_kb > before.guest_ram_kb)
    std::printf("  of which each guest's RAM touched: %.2f MiB\n",
                (double(after.guest_ram_kb) - double(before.guest_ram_kb)) / 1024.0 / count);
}

// The labels of latency_rows' rows that name the backend (the rest are the same for both).
struct LatencyLabels {
  const char *cold, *create, *pool, *pool_no_reuse, *pool_destroy, *live;
};

// Cold create + exec + destroy (and each part), the same from a pool of `pool_size` (what the
// user waits for: with the released sandbox reset for reuse, and, for comparison, never reused and
// destroyed in the background, or destroyed in the caller), and exec in a live sandbox.
void latency_rows(Backend& backend, const Image& image, const Limits& limits, const ExecRequest& t,
                  int n, int pool_size, const LatencyLabels& label) {
  {
    std::vector<double> total, create, exec, destroy;
    for (int i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      auto s = backend.create(image, limits);
      const auto t1 = Clock::now();
      s->exec(t);
      const auto t2 = Clock::now();
      s->destroy();
      destroy.push_back(ms_since(t2));
      total.push_back(ms_since(t0));
      create.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      exec.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    row(label.cold, total);
    row(label.create, create);
    row("  of which the first exec", exec);
    row("  of which destroy", destroy);
  }
  for (const size_t max_uses : {Pool::kDefaultMaxUses, size_t(1)}) {
    Pool pool(backend, image, limits, pool_size, 2, max_uses);
    std::vector<double> user_ms;
    for (int i = 0; i < n; ++i) {
      pool.wait_until_full();  // a pool keeping up (see the throughput lines for one that cannot)
      const auto t0 = Clock::now();
      auto s = pool.acquire();
      s->exec(t);
      pool.release(std::move(s));
      user_ms.push_back(ms_since(t0));
    }
    row(max_uses > 1 ? label.pool : label.pool_no_reuse, user_ms);
  }
  {
    Pool pool(backend, image, limits, pool_size, 2, 1);
    std::vector<double> destroy_ms;
    for (int i = 0; i < n; ++i) {
      pool.wait_until_full();
      auto s = pool.acquire();
      s->exec(t);
      const auto t1 = Clock::now();
      s->destroy();
      destroy_ms.push_back(ms_since(t1));
    }
    row(label.pool_destroy, destroy_ms);
  }
  auto s = backend.create(image, limits);
  row(label.live, repeat(n, [&] { s->exec(t); }));
}

void bench_namespaces(ImageStore& store, const std::string& dir, const std::string& crun,
                      const Options& o) {
  auto backend = make_backend(BackendKind::kNamespaces, store);
  if (const std::string why = backend->unavailable_reason(); !why.empty()) {
    std::printf("namespaces backend: not measured (%s)\n", why.c_str());
    return;
  }
  const Image host = store.resolve("host");
  const Limits limits;
  ExecRequest t;
  t.argv = {"/bin/true"};
  const int iterations = o.iterations;

  std::printf("| namespaces backend, image host (ms)          |      p50 |      p99 |     n |\n");
  std::printf("|----------------------------------------------|----------|----------|-------|\n");
  latency_rows(*backend, host, limits, t, iterations, /*pool_size=*/8,
               {"k3lab cold: create + exec true + destroy", "  of which create",
                "k3lab pool: acquire + exec true + release", "k3lab pool, no reuse: the same",
                "k3lab pool: destroy in the caller instead", "k3lab exec true in a live sandbox"});
  row("host: posix_spawn /bin/true (no sandbox)",
      repeat(iterations, [&] { spawn_and_wait({"/bin/true"}); }));
  const auto bw = bwrap_alone(find_program("bwrap"));
  row("bwrap alone: run /bin/true", repeat(iterations, [&] { spawn_and_wait(bw); }));
  if (!crun.empty()) {
    int n = 0;
    row("crun: run /bin/true", repeat(iterations, [&] {
          spawn_and_wait({crun, "run", "--bundle", dir + "/bundle",
                          "k3bench-" + std::to_string(getpid()) + "-" + std::to_string(n++)});
        }));
  } else {
    std::printf("| crun: not installed                          |          |          |       |\n");
  }
  std::printf("\nsustained, %d clients, cold: %.1f sandboxes/s (create + exec + destroy)\n",
              o.threads, sustained_rate(*backend, host, limits, o.threads, o.seconds));
  sustained_pool_row(*backend, host, limits, o, "sandboxes");
  {
    // The same clients running bubblewrap alone: the rate k3lab's sandboxes cannot pass.
    std::atomic<int> done{0};
    const auto end = Clock::now() + std::chrono::seconds(o.seconds);
    std::vector<std::thread> workers;
    for (int i = 0; i < o.threads; ++i) {
      workers.emplace_back([&] {
        for (; Clock::now() < end; ++done) spawn_and_wait(bw);
      });
    }
    for (auto& w : workers) w.join();
    std::printf("sustained, %d clients, bwrap alone running /bin/true: %.1f/s\n", o.threads,
                done.load() / double(o.seconds));
  }
  idle_memory(*backend, host, limits, o.idle, o.threads, "namespace sandboxes");
}

// The microVM backend on a busybox image (under software emulation only with
// K3LAB_MICROVM_TCG=1, where the figures say nothing of KVM's).
void bench_microvm(ImageStore& store, const std::string& dir, const Options& o) {
  auto vm = make_backend(BackendKind::kMicrovm, store);
  if (!vm->unavailable_reason().empty() || access("/bin/busybox", X_OK) != 0) {
    std::printf("\nmicrovm: not measured (%s)\n", vm->unavailable_reason().empty()
                                                      ? "no /bin/busybox"
                                                      : vm->unavailable_reason().c_str());
    return;
  }
  fs::create_directories(dir + "/busybox/bin");
  fs::copy_file("/bin/busybox", dir + "/busybox/bin/busybox");
  fs::create_symlink("busybox", dir + "/busybox/bin/true");
  const Image busybox = store.resolve(store.import_directory(dir + "/busybox", "busybox"));
  Limits small;
  small.memory_bytes = 128ull << 20;
  ExecRequest t;
  t.argv = {"/bin/true"};
  vm->create(busybox, small)->destroy();  // builds the initramfs and the layer's disk
  std::printf("\n| microvm backend, busybox image, 128 MiB (ms) |      p50 |      p99 |     n |\n");
  std::printf("|----------------------------------------------|----------|----------|-------|\n");
  const int n = o.vm_iterations;
  latency_rows(
      *vm, busybox, small, t, n, /*pool_size=*/4,
      {"microvm cold: boot + exec true + destroy", "  of which boot (create)",
       "microvm pool: acquire + exec true + release", "microvm pool, no reuse: the same",
       "microvm pool: destroy in the caller instead", "microvm exec true in a live guest"});
  std::printf("\nmicrovm sustained, %d clients, cold: %.1f microVMs/s (boot + exec + destroy)\n",
              o.threads, sustained_rate(*vm, busybox, small, o.threads, o.seconds));
  idle_memory(*vm, busybox, small, o.vm_idle, o.threads, "microVMs (memory limit 128 MiB)");
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = k3::bench::parse_flags(argc, argv,
                                            {"--iterations", "--seconds", "--idle", "--threads",
                                             "--vm-iterations", "--vm-idle", "--backends"});
  auto flag = [&](const char* name, int fallback) {
    return flags.count(name) ? std::stoi(flags.at(name)) : fallback;
  };
  const Options o{flag("--iterations", 100), flag("--seconds", 5),        flag("--idle", 50),
                  flag("--threads", 4),      flag("--vm-iterations", 20), flag("--vm-idle", 8)};
  const std::string backends =
      flags.count("--backends") ? flags.at("--backends") : "namespaces,microvm";
  // The agent is built beside k3lab, one directory up.
  if (!getenv("K3LAB_SANDBOX_AGENT"))
    setenv("K3LAB_SANDBOX_AGENT",
           (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "k3lab-sandbox-agent")
               .c_str(),
           1);
  char tmpl[] = "/tmp/k3sbx-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  fs::permissions(dir, fs::perms(0755));
  int status = 0;
  {
    ImageStore store(dir + "/store");
    auto section = [&](const char* name, const std::function<void()>& run) {
      if (backends.find(name) == std::string::npos) return;
      try {
        run();
      } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: %s\n", name, e.what());
        status = 1;
      }
    };
    section("namespaces", [&] { bench_namespaces(store, dir, crun_bundle(dir + "/bundle"), o); });
    section("microvm", [&] { bench_microvm(store, dir, o); });
  }
  fs::remove_all(dir);
  return status;
}
