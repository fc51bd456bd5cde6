// The HTTP server under the sandbox service: cpp-httplib's request handling on connections that
// this class reads itself, so that what an unauthenticated client can make it hold is bounded
// before any handler runs. cpp-httplib alone reads header lines of any length and number, gives a
// client that sends one byte every few seconds a worker thread for as long as it likes, and has a
// fixed pool of them: a few slow clients stop it.
//
// Here each request's line and headers must arrive within HttpLimits::head_bytes, head_lines and
// head_timeout_s (else 431 or 408, and the connection closes); a body pauses at most
// read_timeout_s; every connection has a thread of its own, up to max_connections open at once
// (more are answered 503 at once). A connection closes after an error response, so a body that
// was refused is never read. Bodies themselves are bounded by the pre-routing handler, which runs
// before cpp-httplib reads them (set_payload_max_length alone skips an oversized body by reading
// it).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>

namespace k3::sandbox {

struct HttpLimits {
  size_t head_bytes = 64 << 10;  // request line and headers together
  size_t head_lines = 100;       // header lines
  double head_timeout_s = 10;    // to send them, from the connection's start or the last response
  double read_timeout_s = 10;    // the longest pause within a body
  double write_timeout_s = 10;   // the longest a client may leave a response unread
  size_t max_connections = 512;  // open at once
  size_t requests_per_connection = 100;
};

class BoundedHttpServer : public httplib::Server {
 public:
  explicit BoundedHttpServer(HttpLimits limits);
  const HttpLimits& limits() const { return limits_; }
  // After a bind: a burst of up to BACKLOG connections waits in the kernel's queue instead of
  // being dropped there and retried by its clients a second later (cpp-httplib listens with 5).
  void widen_backlog(int backlog = 1024);

 private:
  bool process_and_close_socket(socket_t sock) override;

  HttpLimits limits_;
  std::atomic<size_t> connections_{0};
};

}  // namespace k3::sandbox
