// Rendezvous of the learner's ranks on a c10d::TCPStore, as torchrun's static rendezvous: rank 0
// hosts the store at HOST:PORT, the others connect to it, and every rank waits until all
// `world_size` ranks have arrived. The store then carries everything the ranks agree on: the Gloo
// group addresses of each membership epoch (dist/membership.h) and the heartbeats
// (dist/liveness.h).
//
//   rank 0 ── TCPStore server (HOST:PORT) ◀── client ── rank 1
//                 ▲                       ◀── client ── rank 2 …
//                 └── client (rank 0's own connection)
//
// Join fails, with a message naming what to change, when:
//   - the rank is outside [0, world_size)                          (kInvalidArgument)
//   - HOST:PORT is unreachable within the timeout                  (kUnavailable)
//   - another process already registered the same rank             (kAlreadyExists)
//   - a rank's config_hash differs from rank 0's (all ranks fail)  (kFailedPrecondition)
//   - some ranks did not arrive within the timeout (names them)    (kDeadlineExceeded)
//
// Keys written at the root of the store: "rank/<r>" (a counter: 1 = taken), "config_hash",
// "ready/<r>", "world_size", "rendezvous_*" (errors, counters), "closed" (Close()).
//
// Thread-safety: a TCPStore connection serialises its calls, and a blocking wait() holds it for
// the whole wait. Components that wait on the store while others use it (the heartbeat thread,
// a scheduler awaiting the next epoch) take their own connection from Connect().
#ifndef FLYWHEEL_DIST_RENDEZVOUS_H_
#define FLYWHEEL_DIST_RENDEZVOUS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/core/host_port.h"

namespace flywheel::dist {

struct RendezvousOptions {
  // Where rank 0 hosts the store; the others connect there. The server listens on every local
  // address, so `host` only needs to be how the other ranks reach rank 0.
  std::string host = "127.0.0.1";
  // 29500 is torchrun's default.
  int port = 29500;
  int world_size = 1;
  int rank = 0;
  // Bounds connecting to the store, waiting for the other ranks, and every later store call.
  std::chrono::milliseconds timeout{60000};
  // A digest of everything that must be equal on every rank (the job config). Ranks whose
  // digest differs from rank 0's are refused.
  std::string config_hash;

  absl::Status Validate() const;
  // "127.0.0.1:29500 (rank 1 of 4)"
  std::string DebugString() const;
};

// A TCP port on `host` that was free a moment ago (bind to port 0, read it back, close), for a
// launcher or a test that has to name the rendezvous port before rank 0 starts. Another process
// may take it in between, as with torchrun's standalone mode.
absl::StatusOr<int> PickFreePort(const std::string& host = "127.0.0.1");

// A client connection to the store hosted at HOST:PORT (by rank 0's Rendezvous, or by the core
// of an elastic job for cells that join later), retrying a refused connection until `timeout`.
absl::StatusOr<c10::intrusive_ptr<c10d::Store>> ConnectStore(const std::string& host, int port,
                                                             std::chrono::milliseconds timeout);

class Rendezvous {
 public:
  // Connects (rank 0: hosts) and waits for every rank; see the errors above.
  static absl::StatusOr<std::unique_ptr<Rendezvous>> Join(const RendezvousOptions& options);

  // The store every rank shares. Rank 0's store object also owns the server: it stays up while
  // rank 0's Rendezvous (or any reference to this store) lives.
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  // A further connection to the same store, for a thread that blocks on it.
  absl::StatusOr<c10::intrusive_ptr<c10d::Store>> Connect() const;

  // Call before the process exits, on success and on failure. Rank 0's store dies with it, so
  // rank 0 waits until every rank has closed or the deadline passed (a rank that died never
  // closes): survivors still read heartbeats and errors from the store while they report.
  void Close(absl::Time deadline);

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  // The port the store listens on (the one chosen when options.port was 0).
  int port() const { return port_; }
  const RendezvousOptions& options() const { return options_; }

 private:
  Rendezvous(RendezvousOptions options, c10::intrusive_ptr<c10d::Store> store, int port)
      : options_(std::move(options)), store_(std::move(store)), port_(port) {}

  RendezvousOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  int port_;
};

}  // namespace flywheel::dist

#endif  // FLYWHEEL_DIST_RENDEZVOUS_H_
