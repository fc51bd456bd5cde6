// k3lab-sandbox-agent: the process that waits inside each sandbox (under bubblewrap, or as a
// microVM's init) and runs what k3lab asks, one request at a time, on its stdin and stdout.
// Static, so it runs in any image.
#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/reboot.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "files.h"
#include "guest_init.h"
#include "k3/sandbox/wire.h"
#include "reset.h"
#include "run_command.h"

namespace wire = k3::sandbox::wire;
namespace agent = k3::sandbox::agent;

namespace {

// A reply: status (0 ok), an error line, then the operation's payload.
std::string reply(const std::string& error, const std::string& payload = "") {
  wire::Writer w;
  w.u64(error.empty() ? 0 : 1);
  w.str(error);
  w.str(payload);
  return w.bytes();
}

std::string serve(const std::string& frame) {
  wire::Reader in(frame);
  switch (wire::Op(in.u64())) {
    case wire::Op::kPing:
      return reply("");
    case wire::Op::kExec:
      return reply("", wire::encode(agent::run_command(wire::decode_exec_request(in))));
    case wire::Op::kPut: {
      const std::string path = in.str(), bytes = in.str();
      const auto mode = unsigned(in.u64());
      return reply(agent::put_file(path, bytes, mode));
    }
    case wire::Op::kGet: {
      const std::string path = in.str();
      std::string bytes;
      const std::string why = agent::get_file(path, bytes, wire::kMaxFrame - 4096);
      return reply(why, bytes);
    }
    case wire::Op::kLayer: {
      std::string tree;
      const std::string why =
          agent::archive_tree(agent::writable_layer_fd(), tree, wire::kMaxFrame - 4096);
      return reply(why, tree);
    }
    case wire::Op::kReset: {
      const std::string nonce = in.str();
      return reply(agent::reset_sandbox(in.strs()), nonce);
    }
  }
  return reply("unknown request");
}

}  // namespace

int main(int argc, char** argv) {
  // Under bubblewrap (`--stdio [--filter-fd N]`, where the agent is its PID namespace's PID 1),
  // requests arrive on fd 0 and replies leave on fd 1, and k3lab's compiled seccomp filter on fd
  // N; as a microVM's init (PID 1, no arguments), both go over the virtio console. Commands get
  // pipes of their own, so move the channel out of the way and give the standard descriptors
  // /dev/null.
  const bool vm_init = getpid() == 1 && !(argc > 1 && std::strcmp(argv[1], "--stdio") == 0);
  const int filter_fd =
      argc > 3 && std::strcmp(argv[2], "--filter-fd") == 0 ? std::atoi(argv[3]) : -1;
  int requests, replies;
  if (vm_init) {
    requests = replies = agent::guest_init();
  } else {
    requests = fcntl(0, F_DUPFD_CLOEXEC, 10);
    replies = fcntl(1, F_DUPFD_CLOEXEC, 10);
  }
  const int null = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
  signal(SIGPIPE, SIG_IGN);
  // Commands run as the agent's own user: not dumpable, its memory, descriptors (the channel to
  // k3lab) and environment under /proc/1 are out of their reach.
  prctl(PR_SET_DUMPABLE, 0);
  if (!vm_init) agent::remember_clean_state();
  agent::prepare_commands(
      filter_fd);  // before "ready": a pooled sandbox's first command waits for nothing
  try {
    // Ready: k3lab sends nothing before this (a console is in raw mode only from here on).
    wire::write_frame(replies, reply(""));
    for (;;) wire::write_frame(replies, serve(wire::read_frame(requests)));
  } catch (const wire::WireError&) {
    // k3lab closed the channel: the sandbox is being destroyed.
  }
  if (vm_init) reboot(RB_POWER_OFF);  // PID 1 must not exit (the kernel would panic)
  return 0;
}
