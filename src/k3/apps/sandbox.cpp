// `k3lab sandbox ...`: isolated environments for agent code (docs/sandbox.md).
//   run IMAGE [--backend B] [--timeout S] [--memory MB] -- CMD...   one command, then destroyed
//   import NAME PATH                                               a directory or tarball as an
//   image images                                                         the store's images serve
//   [--port P] [--token-file F]                              the HTTP JSON API on loopback
#include "k3/sandbox/sandbox.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <random>

#include "k3/apps/commands.h"
#include "k3/apps/number_option.h"
#include "k3/base/error.h"
#include "k3/base/fs.h"
#include "k3/base/stop_signals.h"
#include "k3/sandbox/leftovers.h"
#include "k3/sandbox/service.h"

namespace k3::apps {
namespace {

using namespace k3::sandbox;

struct SandboxArgs {
  std::string store = ImageStore::default_root();
  std::string image, backend = "namespaces", name, path, host = "127.0.0.1", token_file;
  std::vector<std::string> command;
  double timeout_s = 30, memory_mb = 512;
  int port = 0;
  size_t warm = 4, max_sandboxes = 256;
};

// The command's own exit status, 124 when it ran out of time (as timeout(1)), 128+N for signal N.
int exit_status(const ExecResult& r) {
  if (r.timed_out) return 124;
  if (r.signal) return 128 + int(r.signal);
  return int(r.exit_code);
}

void run(const SandboxArgs& a) {
  ImageStore store(a.store);
  start_guardian(store.root());  // the sandbox removed even if this process is killed
  auto backend = make_backend(parse_backend(a.backend), store);
  if (const std::string why = backend->unavailable_reason(); !why.empty())
    throw Error("backend " + a.backend + " is unavailable: " + why);
  Limits limits;
  limits.timeout_s = a.timeout_s;
  limits.memory_bytes = uint64_t(a.memory_mb * (1 << 20));
  auto s = backend->create(store.resolve(a.image), limits);
  ExecRequest q;
  q.argv = a.command;
  if (!isatty(0)) q.stdin_data.assign(std::istreambuf_iterator<char>(std::cin), {});
  const ExecResult r = s->exec(q);
  s->destroy();
  std::fwrite(r.stdout_data.data(), 1, r.stdout_data.size(), stdout);
  std::fwrite(r.stderr_data.data(), 1, r.stderr_data.size(), stderr);
  std::fflush(stdout);
  if (!r.error.empty()) std::fprintf(stderr, "k3lab sandbox: %s\n", r.error.c_str());
  if (r.timed_out) std::fprintf(stderr, "k3lab sandbox: timed out after %g s\n", a.timeout_s);
  if (r.stdout_truncated || r.stderr_truncated)
    std::fprintf(stderr, "k3lab sandbox: output truncated\n");
  std::exit(exit_status(r));
}

void import(const SandboxArgs& a) {
  ImageStore store(a.store);
  check_image_name(a.name);
  K3_CHECK(std::filesystem::exists(a.path), "image source ", a.path, " does not exist");
  const std::string digest = std::filesystem::is_directory(a.path)
                                 ? store.import_directory(a.path, a.name)
                                 : store.import_tarball(a.path, a.name);
  std::printf("%s %s\n", a.name.c_str(), digest.c_str());
}

std::string random_token() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 32; ++i) t += "0123456789abcdef"[rd() % 16];
  return t;
}

void serve(const SandboxArgs& a) {
  ImageStore store(a.store);
  start_guardian(store.root());  // its sandboxes removed even if this process is killed
  ServiceOptions o;
  o.host = a.host;
  o.port = a.port;
  o.warm = a.warm;
  o.max_sandboxes = a.max_sandboxes;
  o.limits.timeout_s = a.timeout_s;
  o.limits.memory_bytes = uint64_t(a.memory_mb * (1 << 20));
  const char* env = std::getenv("K3LAB_SANDBOX_TOKEN");
  o.token = env && *env ? env : random_token();
  Service service(store, o);
  if (!a.token_file.empty()) write_file_atomic(a.token_file, o.token + "\n", 0600);  // a secret
  std::printf("k3lab sandbox service on http://%s:%d (token %s)\n", a.host.c_str(), service.port(),
              a.token_file.empty() ? o.token.c_str() : ("in " + a.token_file).c_str());
  std::fflush(stdout);
  // SIGINT or SIGTERM: stop serving, then destroy every sandbox and pool on the way out.
  StopSignals stop;
  StopNote note([&] { service.stop(); });
  service.serve();
}

// A command's wall clock: from the service's least (1 ms) to a week; memory: 16 MiB to 16 TiB.
void add_limit_options(CLI::App* cmd, SandboxArgs& a, const std::string& what) {
  add_number(cmd, "--timeout", a.timeout_s,
             what + " wall-clock limit in seconds, 0.001 to 604800 (exit status 124 past it)",
             Bounds<double>{0.001, 604800});
  add_number(cmd, "--memory", a.memory_mb, what + " memory limit in MiB, 16 to 16777216",
             Bounds<double>{16, 16777216});
}

void add_store_option(CLI::App* cmd, SandboxArgs& a) {
  cmd->add_option(
      "--store", a.store,
      "Image store directory (default: $K3LAB_SANDBOX_STORE, /var/lib/k3lab/sandbox as root)");
}

}  // namespace

void add_sandbox(CLI::App& app) {
  auto* sandbox =
      app.add_subcommand("sandbox", "Isolated sandboxes for agent code (docs/sandbox.md)");
  sandbox->require_subcommand(1);
  auto a = std::make_shared<SandboxArgs>();

  auto* r =
      sandbox->add_subcommand("run", "Run one command in a fresh sandbox: run IMAGE -- CMD...");
  r->add_option("image", a->image, "'host', an image name or digest")->required();
  r->add_option("command", a->command, "The command and its arguments (after --)")->required();
  r->add_option("--backend", a->backend, "namespaces or microvm");
  add_limit_options(r, *a, "The command's");
  add_store_option(r, *a);
  r->callback([a] { run(*a); });

  auto* i = sandbox->add_subcommand("import", "Store a directory or tarball as a named image");
  i->add_option("name", a->name, "The image's name")->required();
  i->add_option("path", a->path, "A root file system: directory or tarball")->required();
  add_store_option(i, *a);
  i->callback([a] { import(*a); });

  auto* l = sandbox->add_subcommand("images", "List the store's images");
  add_store_option(l, *a);
  l->callback([a] {
    ImageStore store(a->store);
    for (const auto& [name, digest] : store.names())
      std::printf("%-24s %s\n", name.c_str(), digest.c_str());
  });

  auto* s = sandbox->add_subcommand("serve", "Serve sandboxes over HTTP JSON on loopback");
  s->add_option("--host", a->host, "Loopback address to listen on");
  add_number(s, "--port", a->port, "Port (0: any free one, printed)", Bounds<int>{0, 65535});
  s->add_option(
      "--token-file", a->token_file,
      "Write the bearer token here instead of printing it ($K3LAB_SANDBOX_TOKEN sets it)");
  add_number(s, "--warm", a->warm, "Warm sandboxes per image and backend, 0 to 256",
             Bounds<size_t>{0, 256});
  add_number(s, "--max-sandboxes", a->max_sandboxes,
             "Live sandboxes at most, the pools' warm ones included, 1 to 65536",
             Bounds<size_t>{1, 65536});
  add_limit_options(s, *a, "Each command's (the most a request may ask)");
  add_store_option(s, *a);
  s->callback([a] { serve(*a); });
}

}  // namespace k3::apps
