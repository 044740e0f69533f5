// A TCP proxy that injects network faults between clients (the actors) and a server (the
// buffer). One thread forwards bytes both ways over non-blocking sockets (poll) and, on request:
//
//   SetDelay(d)    holds every chunk for d before forwarding it (a slow, congested link)
//   RefuseFor(d)   accepts new connections and closes them at once, for d (a flapping route)
//   CutAll()       resets every open connection (calls in flight fail mid-stream: an insert
//                  the server committed may lose its acknowledgement)
//
//   client ──▶ [listen 127.0.0.1:port] ─ to_server queue (due times) ─▶ upstream
//          ◀──                         ◀─ to_client queue (due times) ─
//
// A side that stops reading is not read past kMaxQueuedBytes (backpressure as TCP would).
// Thread-safe: the control calls may come from any thread.
#ifndef FLYWHEEL_CHAOS_TCP_PROXY_H_
#define FLYWHEEL_CHAOS_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace flywheel::chaos {

class TcpProxy {
 public:
  static constexpr int64_t kMaxQueuedBytes = 4 << 20;

  // Listens on 127.0.0.1:`listen_port` (0 = any free port) and forwards to `upstream`
  // ("127.0.0.1:PORT" or "localhost:PORT").
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(int listen_port,
                                                         const std::string& upstream);
  ~TcpProxy();

  int port() const { return port_; }
  std::string address() const;

  void SetDelay(absl::Duration delay);
  void RefuseFor(absl::Duration duration);
  void CutAll();

  struct Stats {
    int64_t accepted = 0;  // connections forwarded
    int64_t refused = 0;   // closed at once (RefuseFor) or upstream unreachable
    int64_t cut = 0;       // open connections reset by CutAll
    int64_t bytes = 0;     // forwarded, both ways
  };
  Stats stats() const;

 private:
  struct Connection;
  TcpProxy() = default;
  void Loop();
  void Wake();

  int port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};    // a pipe: control calls wake the loop
  uint32_t upstream_ip_ = 0;  // network order
  uint16_t upstream_port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Time refuse_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool cut_requested_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::chaos

#endif  // FLYWHEEL_CHAOS_TCP_PROXY_H_
