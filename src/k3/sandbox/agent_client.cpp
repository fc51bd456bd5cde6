#include "k3/sandbox/agent_client.h"

#include <unistd.h>

#include "k3/base/error.h"

namespace k3::sandbox {

namespace {

// A reply's payload; a failure it reports becomes an Error.
std::string payload_of(const std::string& frame) {
  wire::Reader reply(frame);
  const bool failed = reply.u64() != 0;
  const std::string error = reply.str();
  std::string payload = reply.str();
  if (failed) throw Error(error);
  return payload;
}

}  // namespace

std::string AgentClient::call(const std::string& request, int64_t deadline_ms) {
  if (to_ < 0) throw wire::WireError("the sandbox is closed");
  wire::write_frame(to_, request);
  return payload_of(wire::read_frame(from_, deadline_ms));
}

void AgentClient::await_ready(int64_t deadline_ms) {
  if (from_ < 0) throw wire::WireError("the sandbox is closed");
  payload_of(wire::read_frame(from_, deadline_ms));
}

void AgentClient::ping(int64_t deadline_ms) {
  wire::Writer w;
  w.u64(uint64_t(wire::Op::kPing));
  call(w.bytes(), deadline_ms);
}

wire::ExecResult AgentClient::exec(const wire::ExecRequest& request, int64_t deadline_ms) {
  return wire::decode_exec_result(call(wire::encode(request), deadline_ms));
}

void AgentClient::put(const std::string& path, const std::string& bytes, unsigned mode,
                      int64_t deadline_ms) {
  wire::Writer w;
  w.u64(uint64_t(wire::Op::kPut));
  w.str(path);
  w.str(bytes);
  w.u64(mode);
  call(w.bytes(), deadline_ms);
}

std::string AgentClient::get(const std::string& path, int64_t deadline_ms) {
  wire::Writer w;
  w.u64(uint64_t(wire::Op::kGet));
  w.str(path);
  return call(w.bytes(), deadline_ms);
}

std::vector<wire::TreeEntry> AgentClient::layer(int64_t deadline_ms) {
  wire::Writer w;
  w.u64(uint64_t(wire::Op::kLayer));
  return wire::decode_tree(call(w.bytes(), deadline_ms));
}

std::string AgentClient::reset(const std::string& nonce, const std::vector<std::string>& remove,
                               int64_t deadline_ms) {
  wire::Writer w;
  w.u64(uint64_t(wire::Op::kReset));
  w.str(nonce);
  w.strs(remove);
  return call(w.bytes(), deadline_ms);
}

void AgentClient::attach(int to_agent, int from_agent) {
  close();
  to_ = to_agent;
  from_ = from_agent;
}

void AgentClient::close() {
  if (to_ >= 0) ::close(to_);
  if (from_ >= 0 && from_ != to_) ::close(from_);
  to_ = from_ = -1;
}

}  // namespace k3::sandbox
