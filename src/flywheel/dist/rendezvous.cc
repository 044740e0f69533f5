#include "flywheel/dist/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel::dist {
namespace {

// Set once by the first rank that finds the rendezvous cannot succeed (a duplicate rank, a
// config mismatch), so that every waiting rank fails with the same reason instead of timing out.
constexpr char kErrorKey[] = "rendezvous_error";
// Counters: processes connected to the store, and those that returned an error from Join.
constexpr char kConnectedKey[] = "rendezvous_connected";
constexpr char kErrorsSeenKey[] = "rendezvous_errors_seen";

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string String(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

double Seconds(std::chrono::milliseconds d) { return d.count() / 1000.0; }

// Publishes `status` as the rendezvous error (the first one wins) and returns it.
absl::Status Abort(c10d::Store& store, const absl::Status& status) {
  const std::string value = StrCat(static_cast<int>(status.code()), "\n", status.message());
  // Best effort: the rank that fails reports its own error in any case.
  (void)TorchCall("rendezvous: publishing the error",
                  [&] { store.compareSet(kErrorKey, std::vector<uint8_t>(), Bytes(value)); });
  return status;
}

absl::Status PublishedError(const std::string& value) {
  const size_t newline = value.find('\n');
  int code = static_cast<int>(absl::StatusCode::kUnknown);
  if (newline == std::string::npos ||
      !absl::SimpleAtoi(ToAbsl(std::string_view(value).substr(0, newline)), &code)) {
    return absl::UnknownError(value);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), value.substr(newline + 1));
}

// Waits for rank 0's value of `key`, then returns it.
absl::StatusOr<std::string> AwaitRankZeroValue(c10d::Store& store, const std::string& key,
                                               const std::string& where,
                                               std::chrono::milliseconds timeout) {
  std::string value;
  absl::Status s = TorchCall(StrCat("rendezvous at ", where, ": reading rank 0's ", key), [&] {
    store.wait({key}, timeout);
    value = String(store.get(key));
  });
  if (!s.ok()) {
    return absl::DeadlineExceededError(StrCat("rendezvous at ", where,
                                              ": rank 0 did not publish its ", key, " within ",
                                              Seconds(timeout), " s (", s.message(), ")"));
  }
  return value;
}

}  // namespace

absl::Status RendezvousOptions::Validate() const {
  if (host.empty()) return absl::InvalidArgumentError("rendezvous: host is empty (--rendezvous)");
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        StrCat("rendezvous: world size must be >= 1, got ", world_size, " (--world-size)"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(StrCat("rendezvous: rank ", rank, " is outside the world of ",
                                             world_size, " ranks: --rank must be in 0..",
                                             world_size - 1));
  }
  if (port < 0 || port > 65535 || (port == 0 && world_size > 1)) {
    return absl::InvalidArgumentError(
        StrCat("rendezvous: port ", port, " is not usable: choose a port in 1..65535 (--rendezvous",
               " HOST:PORT); 0 (any free port) only works for a world of one rank"));
  }
  if (timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("rendezvous: timeout must be > 0");
  }
  return absl::OkStatus();
}

std::string RendezvousOptions::DebugString() const {
  return StrCat(host, ":", port, " (rank ", rank, " of ", world_size, ")");
}

absl::StatusOr<int> PickFreePort(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        StrCat("picking a free port on ", host, ": ", gai_strerror(rc)));
  }
  int port = -1;
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr && port < 0; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage bound = {};
    socklen_t len = sizeof(bound);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      error = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (port < 0) return absl::UnavailableError(StrCat("picking a free port on ", host, ": ", error));
  return port;
}

namespace {

// The part of Join after connecting: claim the rank, compare with rank 0, wait for everyone.
absl::Status AwaitAll(c10d::Store& store, const RendezvousOptions& options,
                      const std::string& where, absl::Time deadline) {
  const int r = options.rank;
  const int n = options.world_size;
  const std::string context = StrCat("rendezvous at ", where, " (rank ", r, " of ", n, ")");
  const auto remaining = [&] {
    return std::max(std::chrono::milliseconds(1),
                    absl::ToChronoMilliseconds(deadline - absl::Now()));
  };

  // One process per rank: the counter of "rank/<r>" says how many claimed it.
  int64_t claims = 0;
  RETURN_IF_ERROR(TorchCall(context, [&] { claims = store.add(StrCat("rank/", r), 1); }));
  if (claims > 1) {
    return Abort(store, absl::AlreadyExistsError(StrCat(
                            "rendezvous at ", where, ": rank ", r, " was claimed by ", claims,
                            " processes: give every process its own --rank in 0..", n - 1)));
  }

  // Rank 0's world size and config are the reference; the others compare theirs.
  const std::string world = StrCat(n);
  if (r == 0) {
    RETURN_IF_ERROR(TorchCall(context, [&] {
      store.set("world_size", Bytes(world));
      store.set("config_hash", Bytes(options.config_hash));
    }));
  } else {
    ASSIGN_OR_RETURN(std::string world0,
                     AwaitRankZeroValue(store, "world_size", where, remaining()));
    if (world0 != world) {
      return Abort(store, absl::FailedPreconditionError(
                              StrCat("rendezvous at ", where, ": rank ", r,
                                     " was started with world size ", n, " but rank 0 with ",
                                     world0, ": start every rank with the same --world-size")));
    }
    ASSIGN_OR_RETURN(std::string hash0,
                     AwaitRankZeroValue(store, "config_hash", where, remaining()));
    if (hash0 != options.config_hash) {
      return Abort(store, absl::FailedPreconditionError(StrCat(
                              "rendezvous at ", where, ": the config of rank ", r, " (hash '",
                              options.config_hash, "') differs from rank 0's (hash '", hash0,
                              "'): start every rank with the same config")));
    }
  }
  RETURN_IF_ERROR(TorchCall(context, [&] { store.set(StrCat("ready/", r), Bytes("1")); }));

  // Every rank waits for all the others, and stops early when one of them published an error.
  // The store has no wait-for-any, so this polls two cheap checks; the deadline bounds it. At
  // the deadline rank 0 publishes who is missing, so that every rank reports the same.
  std::vector<std::string> ready_keys;
  for (int i = 0; i < n; ++i) ready_keys.push_back(StrCat("ready/", i));
  while (true) {
    bool all_ready = false;
    std::optional<std::string> error;
    RETURN_IF_ERROR(TorchCall(context, [&] {
      if (store.check({kErrorKey})) error = String(store.get(kErrorKey));
      all_ready = store.check(ready_keys);
    }));
    if (error.has_value()) return PublishedError(*error);
    if (all_ready) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      std::vector<int> missing;
      RETURN_IF_ERROR(TorchCall(context, [&] {
        for (int i = 0; i < n; ++i) {
          if (!store.check({ready_keys[i]})) missing.push_back(i);
        }
      }));
      return Abort(
          store,
          absl::DeadlineExceededError(StrCat(
              "rendezvous at ", where, ": rank", missing.size() == 1 ? " " : "s ",
              Join(missing, ", "), " of ", n, " did not arrive within ", Seconds(options.timeout),
              " s: are they started, with the same --rendezvous and --world-size?")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Join(const RendezvousOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  const int r = options.rank;
  // Rank 0 hosts the store, which dies with it: the others wait 2 s longer than rank 0, so that
  // rank 0 is the one to name missing ranks (and publish them), and rank 0 stays up until the
  // others have read an error (or a few seconds passed), so that every rank reports the reason,
  // not a lost store.
  const absl::Time deadline = absl::Now() + absl::FromChrono(options.timeout) +
                              (r == 0 ? absl::ZeroDuration() : absl::Seconds(2));
  std::string where = StrCat(options.host, ":", options.port);

  c10::intrusive_ptr<c10d::TCPStore> tcp;
  c10d::TCPStoreOptions tcp_options;
  tcp_options.port = static_cast<uint16_t>(options.port);
  tcp_options.isServer = r == 0;
  tcp_options.numWorkers = options.world_size;
  tcp_options.waitWorkers = false;  // waited for in AwaitAll, so that errors name who is missing
  tcp_options.timeout = options.timeout;
  // c10d retries a refused connection only for some timeouts (it gave up at once with 1.5 s in
  // tests), so the other ranks retry themselves until the timeout: they may start before rank 0.
  const absl::Time connect_by = absl::Now() + absl::FromChrono(options.timeout);
  absl::Status connected;
  while (true) {
    connected = TorchCall(
        "c10d", [&] { tcp = c10::make_intrusive<c10d::TCPStore>(options.host, tcp_options); });
    if (connected.ok() || r == 0 || absl::Now() + absl::Milliseconds(100) >= connect_by) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    tcp_options.timeout = std::max(std::chrono::milliseconds(1),
                                   absl::ToChronoMilliseconds(connect_by - absl::Now()));
  }
  if (!connected.ok()) {
    const std::string why(connected.message().substr(6));  // drop "c10d: "
    if (r == 0) {
      return absl::UnavailableError(StrCat(
          "rendezvous: rank 0 could not host the store on port ", options.port, " (", why,
          "): is another job (or a second rank 0) using it? choose another --rendezvous port"));
    }
    return absl::UnavailableError(StrCat("rendezvous: rank ", r, " could not reach the store at ",
                                         where, " within ", Seconds(options.timeout), " s (", why,
                                         "): is rank 0 running, and is --rendezvous its address?"));
  }
  tcp->setTimeout(options.timeout);  // the retries above may have shortened it
  const int port = tcp->getPort();
  where = StrCat(options.host, ":", port);
  c10::intrusive_ptr<c10d::Store> store = tcp;
  (void)TorchCall("", [&] { store->add(kConnectedKey, 1); });

  if (absl::Status s = AwaitAll(*store, options, where, deadline); !s.ok()) {
    (void)TorchCall("", [&] {
      if (r != 0) {
        store->add(kErrorsSeenKey, 1);
        return;
      }
      const absl::Time linger = absl::Now() + absl::Seconds(3);
      while (absl::Now() < linger &&
             store->add(kErrorsSeenKey, 0) < store->add(kConnectedKey, 0) - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    return s;
  }
  RendezvousOptions joined = options;
  joined.port = port;
  return std::unique_ptr<Rendezvous>(new Rendezvous(std::move(joined), std::move(store), port));
}

void Rendezvous::Close(absl::Time deadline) {
  (void)TorchCall("rendezvous: closing", [&] {
    int64_t closed = store_->add("closed", 1);
    while (options_.rank == 0 && closed < options_.world_size && absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      closed = store_->add("closed", 0);
    }
  });
}

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> Rendezvous::Connect() const {
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> store =
      ConnectStore(options_.host, port_, options_.timeout);
  if (!store.ok()) return Annotate(store.status(), StrCat("rendezvous: rank ", options_.rank));
  return store;
}

absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const std::string& host, int port,
                                                             std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions tcp_options;
  tcp_options.port = static_cast<uint16_t>(port);
  tcp_options.isServer = false;
  c10::intrusive_ptr<c10d::Store> store;
  // As in Join: c10d does not always retry a refused connection itself.
  const absl::Time connect_by = absl::Now() + absl::FromChrono(timeout);
  for (;;) {
    tcp_options.timeout = std::max(std::chrono::milliseconds(1),
                                   absl::ToChronoMilliseconds(connect_by - absl::Now()));
    absl::Status connected =
        TorchCall(StrCat("connecting to the store at ", host, ":", port),
                  [&] { store = c10::make_intrusive<c10d::TCPStore>(host, tcp_options); });
    if (connected.ok()) break;
    if (absl::Now() + absl::Milliseconds(100) >= connect_by) return connected;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  RETURN_IF_ERROR(TorchCall("store", [&] { store->setTimeout(timeout); }));
  return store;
}

}  // namespace flywheel::dist
