// Which rank stopped: heartbeats in the rendezvous store, read when a collective fails.
//
// A collective that fails because a peer died says little ("Connection closed by peer
// [127.0.0.1]:41597", or a timeout). Each rank runs a heartbeat thread that writes its wall-clock
// time to "heartbeat/<id>" every `interval`; when a collective fails, Explain reads the peers'
// heartbeats and adds the ranks that stopped to the error:
//
//   learner epoch 0: rank 0 of 3: all-reduce: Connection closed by peer …;
//   rank 2 stopped (no heartbeat for 3.1 s)
//
// Gloo sees a closed connection at once, before the dead rank's heartbeat is old enough to be
// called stale; Explain therefore waits, up to stale_after + interval, until either a peer's
// heartbeat turns stale or the time has passed (every peer alive: the error is left as it is,
// with a note saying so). Ages compare the writer's clock with the reader's: across hosts this
// assumes clocks synchronised (NTP) to well under stale_after.
//
//   heartbeat thread ──set("heartbeat/<id>", now)──▶ store ◀──get("heartbeat/<peer>")── Explain
//
// The heartbeat thread blocks its store connection at each write, so it gets a connection of its
// own (Rendezvous::Connect()), not the one Gloo waits on while forming a group.
//
// Thread-safety: every method may be called from any thread.
#ifndef FLYWHEEL_DIST_LIVENESS_H_
#define FLYWHEEL_DIST_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace flywheel::dist {

struct LivenessOptions {
  // How often this rank writes its heartbeat.
  absl::Duration interval = absl::Milliseconds(500);
  // A peer whose heartbeat is older than this has stopped. At least 2 × interval.
  absl::Duration stale_after = absl::Seconds(3);
  // Keys are "<key_prefix><id>".
  std::string key_prefix = "heartbeat/";
  // The id of the rank whose process hosts the store (the rendezvous's rank 0), named when the
  // store itself is unreachable; -1 when the store lives elsewhere.
  int store_host = 0;

  absl::Status Validate() const;
};

class Liveness {
 public:
  enum class State {
    kAlive,      // heartbeat younger than stale_after
    kStopped,    // heartbeat older than stale_after: crashed, killed, or hung
    kLeft,       // stopped its heartbeat on purpose (Stop())
    kNeverSeen,  // no heartbeat yet: not started, or started without liveness
  };
  struct Peer {
    int id = 0;
    State state = State::kNeverSeen;
    absl::Duration age;  // since its last heartbeat (kAlive, kStopped)
  };

  // Writes the first heartbeat of `my_id`, then starts the thread that repeats it. `peers` are
  // the ids Explain looks at (this rank's own id is skipped). `store` must stay valid while this
  // object lives.
  static absl::StatusOr<std::unique_ptr<Liveness>> Start(c10::intrusive_ptr<c10d::Store> store,
                                                         int my_id, std::vector<int> peers,
                                                         LivenessOptions options);
  ~Liveness();  // Stop()

  // The peers of the next membership epoch.
  void SetPeers(std::vector<int> peers);
  // Stops the heartbeat and marks this rank as left, so that peers do not report it stopped.
  void Stop();

  // Every peer's state now.
  absl::StatusOr<std::vector<Peer>> Check();
  // `collective_error` with the peers that stopped or left appended to its message (same code);
  // OK stays OK. Blocks up to stale_after + interval while every peer still looks alive.
  absl::Status Explain(const absl::Status& collective_error);

  int id() const { return id_; }
  // Heartbeats written so far (for tests to wait on).
  int64_t beats() const { return beats_.load(std::memory_order_relaxed); }

 private:
  Liveness(c10::intrusive_ptr<c10d::Store> store, int my_id, std::vector<int> peers,
           LivenessOptions options);
  absl::Status Beat();
  void Run();
  std::string Key(int id) const;

  const c10::intrusive_ptr<c10d::Store> store_;
  const int id_;
  const LivenessOptions options_;
  std::atomic<int64_t> beats_{0};

  absl::Mutex mu_;
  std::vector<int> peers_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The last heartbeat that failed to reach the store (OK when the last one did).
  absl::Status beat_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // runs Run(); joined by Stop()
};

}  // namespace flywheel::dist

#endif  // FLYWHEEL_DIST_LIVENESS_H_
