#include "flywheel/chaos/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel::chaos {
namespace {

constexpr size_t kChunk = 64 << 10;

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

// Closes with a reset rather than a FIN: the peer sees the connection broken, not ended.
void Reset(int fd) {
  if (fd < 0) return;
  linger hard = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  close(fd);
}

struct Chunk {
  std::string data;
  size_t offset = 0;
  absl::Time due;
};

// One direction of a connection: bytes read from `from`, waiting to be written to `to`.
struct Flow {
  std::deque<Chunk> queue;
  int64_t queued = 0;
  bool eof = false;   // `from` ended: shut `to` down for writing once drained
  bool shut = false;  // done that
  bool Drained() const { return queue.empty(); }
};

}  // namespace

struct TcpProxy::Connection {
  int client = -1;
  int server = -1;
  Flow to_server;  // client -> server
  Flow to_client;  // server -> client
  bool broken = false;
};

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(int listen_port,
                                                          const std::string& upstream) {
  std::unique_ptr<TcpProxy> proxy(new TcpProxy());
  const size_t colon = upstream.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("proxy upstream \"", upstream, "\" is not host:port"));
  }
  std::string host = upstream.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  in_addr ip{};
  if (inet_pton(AF_INET, host.c_str(), &ip) != 1) {
    return absl::InvalidArgumentError(
        StrCat("proxy upstream \"", upstream, "\": the host must be an IPv4 address"));
  }
  proxy->upstream_ip_ = ip.s_addr;
  proxy->upstream_port_ = static_cast<uint16_t>(std::stoi(upstream.substr(colon + 1)));

  proxy->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(proxy->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(listen_port));
  if (bind(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(proxy->listen_fd_, 128) != 0) {
    const std::string error = std::strerror(errno);
    close(proxy->listen_fd_);
    proxy->listen_fd_ = -1;
    return absl::UnavailableError(
        StrCat("proxy: cannot listen on 127.0.0.1:", listen_port, ": ", error));
  }
  socklen_t len = sizeof(addr);
  getsockname(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  proxy->port_ = ntohs(addr.sin_port);
  SetNonBlocking(proxy->listen_fd_);
  if (pipe(proxy->wake_) != 0) return absl::InternalError("proxy: pipe failed");
  SetNonBlocking(proxy->wake_[0]);
  SetNonBlocking(proxy->wake_[1]);
  TcpProxy* self = proxy.get();
  proxy->thread_ = std::thread([self] { self->Loop(); });
  return proxy;
}

TcpProxy::~TcpProxy() {
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
}

std::string TcpProxy::address() const { return StrCat("127.0.0.1:", port_); }

void TcpProxy::Wake() {
  const char byte = 1;
  if (write(wake_[1], &byte, 1) < 0) {
    // Full pipe: the loop is awake already.
  }
}

void TcpProxy::SetDelay(absl::Duration delay) {
  {
    absl::MutexLock lock(&mu_);
    delay_ = delay;
  }
  Wake();
}

void TcpProxy::RefuseFor(absl::Duration duration) {
  {
    absl::MutexLock lock(&mu_);
    refuse_until_ = absl::Now() + duration;
  }
  Wake();
}

void TcpProxy::CutAll() {
  {
    absl::MutexLock lock(&mu_);
    cut_requested_ = true;
  }
  Wake();
}

TcpProxy::Stats TcpProxy::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void TcpProxy::Loop() {
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  char buffer[kChunk];
  while (!stop_.load()) {
    absl::Duration delay;
    bool cut = false;
    {
      absl::MutexLock lock(&mu_);
      delay = delay_;
      std::swap(cut, cut_requested_);
      if (cut) stats_.cut += static_cast<int64_t>(connections.size());
    }
    if (cut) {
      for (auto& c : connections) {
        Reset(c->client);
        Reset(c->server);
      }
      connections.clear();
    }
    const absl::Time now = absl::Now();

    // What each socket waits for; the soonest due chunk bounds the wait.
    absl::Time next_due = now + absl::Milliseconds(100);
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_[0], POLLIN, 0});
    for (auto& c : connections) {
      auto events = [&](const Flow& in, const Flow& out) {
        short e = 0;
        if (!in.eof && in.queued < kMaxQueuedBytes) e |= POLLIN;
        if (!out.queue.empty()) {
          if (out.queue.front().due <= now) {
            e |= POLLOUT;
          } else {
            next_due = std::min(next_due, out.queue.front().due);
          }
        }
        return e;
      };
      fds.push_back({c->client, events(c->to_server, c->to_client), 0});
      fds.push_back({c->server, events(c->to_client, c->to_server), 0});
    }
    const int timeout_ms =
        static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(next_due - now) + 1));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[1].revents & POLLIN) {
      char drain[64];
      while (read(wake_[0], drain, sizeof(drain)) > 0) {
      }
    }

    if (fds[0].revents & POLLIN) {
      // Read after the poll: a RefuseFor that woke it means to refuse the connection waiting now.
      absl::Time refuse_until;
      {
        absl::MutexLock lock(&mu_);
        refuse_until = refuse_until_;
      }
      while (true) {
        const int client = accept(listen_fd_, nullptr, nullptr);
        if (client < 0) break;
        if (absl::Now() < refuse_until) {
          Reset(client);
          absl::MutexLock lock(&mu_);
          ++stats_.refused;
          continue;
        }
        const int server = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = upstream_ip_;
        addr.sin_port = htons(upstream_port_);
        // Loopback: a blocking connect is answered at once (refused when the server is down).
        if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
          Reset(client);
          close(server);
          absl::MutexLock lock(&mu_);
          ++stats_.refused;
          continue;
        }
        const int one = 1;
        for (int fd : {client, server}) {
          SetNonBlocking(fd);
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        auto c = std::make_unique<Connection>();
        c->client = client;
        c->server = server;
        connections.push_back(std::move(c));
        absl::MutexLock lock(&mu_);
        ++stats_.accepted;
      }
    }

    // Forward. fds[2 + 2i] is connection i's client, fds[3 + 2i] its server (connections
    // accepted above are not in fds yet: their turn comes next round).
    int64_t forwarded = 0;
    const absl::Time after = absl::Now();
    {
      absl::MutexLock lock(&mu_);
      delay = delay_;  // as of now: what arrived since the poll began is held by the new delay
    }
    for (size_t i = 0; i + 2 < fds.size() && i / 2 < connections.size(); i += 2) {
      Connection& c = *connections[i / 2];
      auto read_into = [&](int fd, short revents, Flow& flow) {
        if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
        while (flow.queued < kMaxQueuedBytes) {
          const ssize_t n = read(fd, buffer, sizeof(buffer));
          if (n > 0) {
            flow.queue.push_back(
                Chunk{std::string(buffer, static_cast<size_t>(n)), 0, after + delay});
            flow.queued += n;
            continue;
          }
          if (n == 0) {
            flow.eof = true;
          } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            c.broken = true;
          }
          return;
        }
      };
      auto write_from = [&](int fd, Flow& flow) {
        while (!flow.queue.empty() && flow.queue.front().due <= after) {
          Chunk& chunk = flow.queue.front();
          const ssize_t n = send(fd, chunk.data.data() + chunk.offset,
                                 chunk.data.size() - chunk.offset, MSG_NOSIGNAL);
          if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.broken = true;
            return;
          }
          chunk.offset += static_cast<size_t>(n);
          flow.queued -= n;
          forwarded += n;
          if (chunk.offset < chunk.data.size()) return;
          flow.queue.pop_front();
        }
        if (flow.eof && flow.Drained() && !flow.shut) {
          shutdown(fd, SHUT_WR);
          flow.shut = true;
        }
      };
      read_into(c.client, fds[i + 2].revents, c.to_server);
      read_into(c.server, fds[i + 3].revents, c.to_client);
      write_from(c.server, c.to_server);
      write_from(c.client, c.to_client);
    }
    // Done: broken, or both directions ended and delivered.
    for (auto it = connections.begin(); it != connections.end();) {
      Connection& c = **it;
      const bool done = c.to_server.shut && c.to_client.shut;
      if (c.broken || done) {
        for (int fd : {c.client, c.server}) {
          if (c.broken) {
            Reset(fd);
          } else {
            close(fd);
          }
        }
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
    if (forwarded > 0) {
      absl::MutexLock lock(&mu_);
      stats_.bytes += forwarded;
    }
  }
  for (auto& c : connections) {
    Reset(c->client);
    Reset(c->server);
  }
}

}  // namespace flywheel::chaos
