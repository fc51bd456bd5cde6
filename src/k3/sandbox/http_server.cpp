#include "k3/sandbox/http_server.h"

#include <arpa/inet.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "k3/base/error.h"

namespace k3::sandbox {

namespace {

using Clock = std::chrono::steady_clock;

// A one-line JSON error body: {"error": MESSAGE}, control characters escaped.
std::string json_error(const std::string& message) {
  // dump() escapes control characters; invalid UTF-8 becomes U+FFFD instead of an exception.
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                 nlohmann::json::error_handler_t::replace) +
         "\n";
}

// A thread for each connection, started when no idle one is waiting, at most MAX (beyond it
// connections wait their turn); threads stay for the next connections.
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  explicit ThreadPerConnection(size_t max) : max_(max) {}

  void enqueue(std::function<void()> job) override {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    // Idle threads already woken for earlier jobs are still counted idle until they take them.
    if (jobs_.size() > idle_ && threads_.size() < max_)
      threads_.emplace_back([this] { work(); });
    else
      wake_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const size_t max_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

const char* reason_of(int status) {
  switch (status) {
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Service Unavailable";
  }
}

// A complete error response of the connection's own (the request never reached cpp-httplib's
// routing), then the connection closes.
void send_error(int fd, int status, const std::string& message) {
  const std::string body = json_error(message);
  const std::string response =
      "HTTP/1.1 " + std::to_string(status) + " " + reason_of(status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  ::send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// One client connection as cpp-httplib's Stream, reading through a buffer of its own. While a
// request's head (line and headers) is read it counts its bytes and lines against the limits and
// keeps them; past its deadline or its limits a read fails and says why (failure()). Every wait
// also ends when the server stops.
class Connection : public httplib::Stream {
 public:
  enum class Failure { kNone, kHeadTooLarge, kTooManyLines, kHeadTimeout };

  Connection(int fd, const HttpLimits& limits, const std::atomic<socket_t>& listening)
      : fd_(fd), limits_(limits), listening_(listening) {}

  // The next request's head starts now; false when none comes (the client closed, or sent
  // nothing in time: no answer is owed then).
  bool next_request() {
    head_.clear();
    lines_ = 0;
    in_head_ = true;
    failure_ = Failure::kNone;
    status_ = 0;
    head_deadline_ = Clock::now() + seconds(limits_.head_timeout_s);
    return pos_ < end_ || fill(head_deadline_) > 0;
  }
  void head_done() { in_head_ = false; }
  const std::string& head() const { return head_; }
  Failure failure() const { return failure_; }
  int status() const { return status_; }  // of the response written, 0 before

  bool is_readable() const override { return pos_ < end_ || wait(POLLIN, read_deadline()); }
  bool is_writable() const override {
    return wait(POLLOUT, Clock::now() + seconds(limits_.write_timeout_s));
  }

  ssize_t read(char* out, size_t size) override {
    if (in_head_) {
      if (head_.size() >= limits_.head_bytes) return fail(Failure::kHeadTooLarge);
      size = std::min(size, limits_.head_bytes - head_.size());
    }
    if (pos_ == end_) {
      const ssize_t n = fill(in_head_ ? head_deadline_ : read_deadline());
      if (n <= 0) return in_head_ && n < 0 && timed_out_ ? fail(Failure::kHeadTimeout) : n;
    }
    const size_t n = std::min(size, end_ - pos_);
    std::memcpy(out, buffer_ + pos_, n);
    if (in_head_) {
      head_.append(buffer_ + pos_, n);
      lines_ += size_t(std::count(buffer_ + pos_, buffer_ + pos_ + n, '\n'));
      // The request line and the blank line that ends the headers are lines too.
      if (lines_ > limits_.head_lines + 2) return fail(Failure::kTooManyLines);
    }
    pos_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* data, size_t size) override {
    if (failure_ != Failure::kNone) return ssize_t(size);  // the connection answers for itself
    // The status line's code; "100 Continue" comes before the response proper.
    if (status_ < 200 && size >= 12 && std::strncmp(data, "HTTP/1.1 ", 9) == 0)
      status_ = std::atoi(std::string(data + 9, 3).c_str());
    if (!is_writable()) return -1;
    return ::send(fd_, data, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(::getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  Clock::time_point read_deadline() const { return Clock::now() + seconds(limits_.read_timeout_s); }

  ssize_t fail(Failure why) {
    failure_ = why;
    return -1;
  }

  // Waits for EVENTS until DEADLINE, in slices, so that a stopping server is noticed.
  bool wait(short events, Clock::time_point deadline) const {
    timed_out_ = false;
    while (listening_ != INVALID_SOCKET) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd p{fd_, events, 0};
      const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 100)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
    return false;
  }

  // Reads what has arrived into the empty buffer: bytes read, 0 at the end, -1 on error or time.
  ssize_t fill(Clock::time_point deadline) {
    pos_ = end_ = 0;
    for (;;) {
      if (!wait(POLLIN, deadline)) return -1;
      const ssize_t n = ::recv(fd_, buffer_, sizeof buffer_, 0);
      if (n >= 0) {
        end_ = size_t(n);
        return n;
      }
      if (errno != EINTR && errno != EAGAIN) return -1;
    }
  }

  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char text[INET6_ADDRSTRLEN] = "";
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    if (a.ss_family == AF_INET) {
      const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
      inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
      port = ntohs(v4.sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
      inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
      port = ntohs(v6.sin6_port);
    }
    ip = text;
  }

  const int fd_;
  const HttpLimits& limits_;
  const std::atomic<socket_t>& listening_;
  char buffer_[4096];
  size_t pos_ = 0, end_ = 0;
  std::string head_;
  size_t lines_ = 0;
  bool in_head_ = false;
  mutable bool timed_out_ = false;
  Failure failure_ = Failure::kNone;
  int status_ = 0;
  Clock::time_point head_deadline_;
};

// cpp-httplib trims a header value's spaces and percent-decodes it: the Authorization header is
// put back exactly as sent (each one; CRLF-terminated lines, as cpp-httplib reads them).
void keep_authorization_raw(const std::string& head, httplib::Request& req) {
  req.headers.erase("Authorization");
  static const std::string name = "authorization:";
  for (size_t at = head.find("\r\n"); at != std::string::npos;) {
    const size_t begin = at + 2, end = head.find("\r\n", begin);
    if (end == std::string::npos) break;
    const std::string line = head.substr(begin, end - begin);
    if (line.find('\n') == std::string::npos && line.size() >= name.size() &&
        strncasecmp(line.c_str(), name.c_str(), name.size()) == 0) {
      const size_t value = line.find_first_not_of(" \t", name.size());
      req.headers.emplace("Authorization", value == std::string::npos ? "" : line.substr(value));
    }
    at = end;
  }
}

// Closing with unread bytes resets the connection, which can discard the response before the
// client reads it: stop writing, then read and drop what is still coming, briefly and boundedly.
void linger_and_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  char drop[4096];
  size_t dropped = 0;
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (dropped < (1u << 20) && Clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, drop, sizeof drop, 0);
    if (n <= 0) break;
    dropped += size_t(n);
  }
  ::close(fd);
}

}  // namespace

BoundedHttpServer::BoundedHttpServer(HttpLimits limits) : limits_(limits) {
  // Beyond the connection limit a few more threads answer 503 at once instead of queueing.
  new_task_queue = [this] { return new ThreadPerConnection(limits_.max_connections + 16); };
}

void BoundedHttpServer::widen_backlog(int backlog) {
  // listen() again on a listening socket changes its backlog (Linux).
  K3_CHECK(svr_sock_ != INVALID_SOCKET && ::listen(svr_sock_, backlog) == 0,
           "cannot widen the listening socket's backlog: ", std::strerror(errno));
}

bool BoundedHttpServer::process_and_close_socket(socket_t sock) {
  struct Count {
    std::atomic<size_t>& n;
    ~Count() { --n; }
  } open{connections_};
  if (++connections_ > limits_.max_connections) {
    send_error(sock, 503,
               "too many connections (" + std::to_string(limits_.max_connections) + " open)");
    linger_and_close(sock);
    return false;
  }
  Connection c(sock, limits_, svr_sock_);
  bool ok = true;
  for (size_t n = 1; ok && n <= limits_.requests_per_connection && c.next_request(); ++n) {
    bool closed = false;
    ok = process_request(c, n == limits_.requests_per_connection, closed,
                         [&c](httplib::Request& req) {
                           c.head_done();
                           keep_authorization_raw(c.head(), req);
                           req.ranges.clear();  // no route serves parts of a response
                         }) &&
         !closed && c.status() < 400;
    switch (c.failure()) {
      case Connection::Failure::kNone:
        break;
      case Connection::Failure::kHeadTooLarge:
        send_error(
            sock, 431,
            "the request line and headers exceed " + std::to_string(limits_.head_bytes) + " bytes");
        break;
      case Connection::Failure::kTooManyLines:
        send_error(sock, 431, "more than " + std::to_string(limits_.head_lines) + " header lines");
        break;
      case Connection::Failure::kHeadTimeout:
        send_error(sock, 408,
                   "the request line and headers took longer than " +
                       std::to_string(int(limits_.head_timeout_s)) + " s");
        break;
    }
    ok = ok && c.failure() == Connection::Failure::kNone;
  }
  linger_and_close(sock);
  return ok;
}

}  // namespace k3::sandbox
