// k3lab's end of the agent protocol (wire.h): requests on one descriptor, replies on another.
// Shared by both backends (a pipe pair to bubblewrap, a serial port of a microVM).
#pragma once

#include <string>
#include <vector>

#include "k3/sandbox/wire.h"

namespace k3::sandbox {

class AgentClient {
 public:
  AgentClient() = default;
  ~AgentClient() { close(); }
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  // Each throws wire::WireError if the agent goes away or misses DEADLINE_MS, and k3::Error when
  // the agent reports a failure (its one line).
  void ping(int64_t deadline_ms);
  void await_ready(int64_t deadline_ms);  // the agent's first message, sent when it starts
  wire::ExecResult exec(const wire::ExecRequest& request, int64_t deadline_ms);
  void put(const std::string& path, const std::string& bytes, unsigned mode, int64_t deadline_ms);
  std::string get(const std::string& path, int64_t deadline_ms);
  // The writable layer, read by the agent (a microVM's; the namespaces backend reads it outside).
  std::vector<wire::TreeEntry> layer(int64_t deadline_ms);
  // Returns the payload of the reply, which is NONCE from an agent in step with its requests.
  std::string reset(const std::string& nonce, const std::vector<std::string>& remove,
                    int64_t deadline_ms);
  void attach(int to_agent, int from_agent);  // takes ownership of both descriptors
  void close();

 private:
  std::string call(const std::string& request, int64_t deadline_ms);  // the reply's payload
  int to_ = -1, from_ = -1;
};

}  // namespace k3::sandbox
