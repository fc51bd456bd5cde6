// k3lab-sandbox-agent: the process that waits inside each sandbox (under bubblewrap, or as a
// microVM's init) and runs what k3lab asks, one request at a time, on its stdin and stdout.
// Static, so it runs in any image.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "files.h"
#include "guest_init.h"
#include "inherited.h"
#include "k3/sandbox/wire.h"
#include "reset.h"
#include "run_command.h"

namespace wire = k3::sandbox::wire;
namespace agent = k3::sandbox::agent;

namespace {

// A reply: status (0 ok), an error line, then the operation's payload; for get, the payload is
// the file itself, streamed from FILE rather than held in the agent's memory (which counts against
// the sandbox's limit beside the file's own pages).
struct Reply {
  std::string error, payload;
  int file = -1;
  uint64_t file_size = 0;
};

Reply answer(std::string error, std::string payload = "") {
  Reply r;
  r.error = std::move(error);
  r.payload = std::move(payload);
  return r;
}

void send(int replies, const Reply& r) {
  const uint64_t payload_size = r.file >= 0 ? r.file_size : r.payload.size();
  wire::Writer head;
  head.u64(r.error.empty() ? 0 : 1);
  head.str(r.error);
  head.u64(payload_size);
  wire::Writer frame;
  frame.u64(head.bytes().size() + payload_size);
  wire::write_bytes(replies, frame.bytes() + head.bytes());
  if (r.file < 0) {
    wire::write_bytes(replies, r.payload);
  } else if (!agent::copy_file(r.file, r.file_size, replies)) {
    // Nothing runs between requests, so the file cannot shrink; if it did, the frame cannot be
    // completed: end the channel (k3lab destroys the sandbox).
    throw wire::WireError("the file changed while it was sent");
  }
}

Reply handle(const std::string& frame) {
  wire::Reader in(frame);
  switch (wire::Op(in.u64())) {
    case wire::Op::kPing:
      return {};
    case wire::Op::kExec:
      return answer("", wire::encode(agent::run_command(wire::decode_exec_request(in))));
    case wire::Op::kPut: {
      const std::string path = in.str(), bytes = in.str();
      const auto mode = unsigned(in.u64());
      return answer(agent::put_file(path, bytes, mode));
    }
    case wire::Op::kGet: {
      Reply r;
      r.error =
          agent::open_for_get(in.str(), wire::kMaxFrame - 4096, r.file, r.file_size, r.payload);
      return r;
    }
    case wire::Op::kLayer: {
      Reply r;
      r.error = agent::archive_tree(agent::writable_layer_fd(), r.payload, wire::kMaxFrame - 4096);
      return r;
    }
    case wire::Op::kReset: {
      const std::string nonce = in.str();
      return answer(agent::reset_sandbox(in.strs()), nonce);
    }
  }
  return answer("unknown request");
}

// Answers one request. A malformed one (k3lab never sends it) gets an error reply, and the agent
// goes on answering.
void serve(const std::string& frame, int replies) {
  Reply r;
  try {
    r = handle(frame);
  } catch (const std::exception& e) {
    r = answer(std::string("malformed request: ") + e.what());
  }
  send(replies, r);
  if (r.file >= 0) close(r.file);
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
  agent::remember_inherited_settings();
  if (!vm_init) agent::remember_clean_state();
  agent::prepare_commands(
      filter_fd);  // before "ready": a pooled sandbox's first command waits for nothing
  try {
    // Ready: k3lab sends nothing before this (a console is in raw mode only from here on).
    send(replies, {});
    for (;;) serve(wire::read_frame(requests), replies);
  } catch (const wire::WireError&) {
    // k3lab closed the channel: the sandbox is being destroyed.
  }
  if (vm_init) reboot(RB_POWER_OFF);  // PID 1 must not exit (the kernel would panic)
  return 0;
}
