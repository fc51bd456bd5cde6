#include "k3/dist/peers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "k3/dist/runtime.h"

namespace k3::dist {
namespace {

constexpr size_t kHostBytes = 256;

struct RemotePeer {
  int rank = 0;
  std::string host;
  std::optional<sockaddr_in> address;  // none: its host did not resolve here, or it cannot listen
};
std::vector<RemotePeer> g_remote;  // the ranks on other machines

// A listening socket on every interface, port chosen by the system; -1 when none can be made.
int listen_any_port(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

std::optional<sockaddr_in> resolve(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (port <= 0 || getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found)
    return std::nullopt;
  sockaddr_in a = *reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  a.sin_port = htons(static_cast<uint16_t>(port));
  freeaddrinfo(found);
  return a;
}

}  // namespace

void start_peer_listener() {
  int port = -1;
  const int fd = listen_any_port(&port);
  if (fd >= 0)
    std::thread([fd] {
      for (;;) {
        const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) close(c);
        else if (errno != EINTR && errno != ECONNABORTED) return;
      }
    }).detach();
  // Every rank's host name and port.
  std::array<char, kHostBytes + sizeof(int)> mine{};
  const std::string here = host_name();
  std::memcpy(mine.data(), here.data(), std::min(here.size(), kHostBytes - 1));
  std::memcpy(mine.data() + kHostBytes, &port, sizeof(int));
  const int n = Runtime::world_size();
  std::vector<char> all(mine.size() * static_cast<size_t>(n));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                static_cast<int>(mine.size()), MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < n; ++r) {
    const char* at = all.data() + mine.size() * static_cast<size_t>(r);
    const std::string host(at, strnlen(at, kHostBytes));
    int their_port = -1;
    std::memcpy(&their_port, at + kHostBytes, sizeof(int));
    if (host != here) g_remote.push_back({r, host, resolve(host, their_port)});
  }
}

bool lead_host_here() {
  return g_remote.empty() || g_remote.front().rank != 0;  // listed in rank order
}

std::vector<PeerProbe> probe_remote_peers(std::chrono::milliseconds timeout) {
  std::vector<PeerProbe> out;
  std::vector<pollfd> waiting;
  std::vector<size_t> waiting_for;  // index into out
  for (const RemotePeer& p : g_remote) {
    out.push_back({p.rank, p.host, PeerState::alive});
    if (!p.address) continue;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&*p.address), sizeof(sockaddr_in)) == 0) {
      close(fd);
    } else if (errno == EINPROGRESS) {
      waiting.push_back({fd, POLLOUT, 0});
      waiting_for.push_back(out.size() - 1);
    } else {
      out.back().state = errno == ECONNREFUSED ? PeerState::ended : PeerState::unreachable;
      close(fd);
    }
  }
  // Whatever has not answered by the deadline cannot be reached.
  const auto until = std::chrono::steady_clock::now() + timeout;
  size_t open = waiting.size();
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0 || poll(waiting.data(), waiting.size(), static_cast<int>(left.count())) <= 0)
      break;
    for (size_t i = 0; i < waiting.size(); ++i) {
      if (waiting[i].fd < 0 || waiting[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(waiting[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      out[waiting_for[i]].state = err == 0              ? PeerState::alive
                                  : err == ECONNREFUSED ? PeerState::ended
                                                        : PeerState::unreachable;
      close(waiting[i].fd);
      waiting[i].fd = -1;  // poll skips it
      --open;
    }
  }
  for (size_t i = 0; i < waiting.size(); ++i)
    if (waiting[i].fd >= 0) {
      out[waiting_for[i]].state = PeerState::unreachable;
      close(waiting[i].fd);
    }
  return out;
}

}  // namespace k3::dist
