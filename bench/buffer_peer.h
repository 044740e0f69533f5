// What every system in `flywheel bench buffer` shares: the payload and its timestamps, the load
// each system is given, the figures of one run, and the servers the benchmark starts itself.
#ifndef FLYWHEEL_BENCH_BUFFER_PEER_H_
#define FLYWHEEL_BENCH_BUFFER_PEER_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"

namespace flywheel::bench {

// Wall-clock nanoseconds: producers and the consumer are different threads (or processes).
int64_t NowNs();

// The figures of one run of one system.
struct CaseResult {
  double items_per_s = 0;
  double mb_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t items = 0;
  nlohmann::json ToJson() const;
};

CaseResult Summarize(int64_t items, int64_t item_bytes, double seconds,
                     std::vector<double> latencies_us);

// The work every system is given: `producers` streams of items, at most `window` of them
// unacknowledged per stream, `per_request` per write; one consumer taking up to `batch` at a time
// and parsing every item as the learner would.
struct BufferLoad {
  int64_t items = 0;  // in all
  int producers = 8;
  int64_t window = 256;
  int64_t per_request = 1;
  int64_t batch = 4096;
  // Items per second offered by all producers together; 0: as fast as acknowledgements allow
  // (the capacity run). A paced run measures latency below saturation.
  double offered_items_per_s = 0;

  int64_t per_producer() const { return items / producers; }
  int64_t total() const { return per_producer() * producers; }
};

// Open-loop pacing of one producer: item i is due at start + i / rate. Items carry their due
// time as their send time, so a system that cannot keep up with the offered load shows it as
// latency rather than by slowing its producers down (coordinated omission). Unpaced (rate 0):
// nothing waits and items carry the time they are sent.
class Pacer {
 public:
  Pacer(double items_per_s, int64_t start_ns);
  void WaitUntilDue(int64_t i) const;
  int64_t SendTime(int64_t i) const;
  // Waits until item `i` is due and returns how many items from `i` on are due by then, at most
  // `most`: a paced producer writes what is due (waiting to fill a write would add latency of
  // its own), an unpaced one always `most`.
  int64_t WaitForNextWrite(int64_t i, int64_t most) const;

 private:
  double interval_ns_;
  int64_t start_ns_;
};

// One run's clocks and records, shared by its producers and consumer: start the producers with
// pacer(), record each received item's latency, stop() when the consumer has all (before the
// producers are joined), then Finish().
class RunRecord {
 public:
  explicit RunRecord(const BufferLoad& load);
  Pacer pacer() const { return Pacer(load_.offered_items_per_s / load_.producers, start_ns_); }
  void stop();
  // The run's figures, or an error naming `system` when an item is missing or anything failed.
  absl::StatusOr<CaseResult> Finish(const std::string& system, int64_t got, int64_t item_bytes);

  std::atomic<bool> failed{false};
  std::vector<double> latencies_us;

 private:
  BufferLoad load_;
  std::chrono::steady_clock::time_point start_;
  int64_t start_ns_;
  double seconds_ = 0;
};

// A bounded count of items in flight per producer stream (the pipelining window).
class Window {
 public:
  explicit Window(int64_t size) : free_(size) {}
  void Acquire(int64_t n);
  void Release(int64_t n);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t free_;  // guarded by mu_
};

// A trajectory whose serialized form is about `bytes` long.
Trajectory MakePayload(int64_t bytes);

// `base` (a serialized trajectory) with its id and created_unix_ns overridden: protobuf keeps the
// last value of a singular field, so appending the two fields is what serializing the changed
// message gives.
std::string Stamp(const std::string& base, const std::string& id, int64_t created_ns);

// Parses a sampled trajectory as the learner would and returns its send time (0 if unparsable).
int64_t ParseCreated(const char* data, size_t size);

// Latency in microseconds from a received item's send time to `now_ns`.
double LatencyUs(const char* data, size_t size, int64_t now_ns);

// A free TCP port on 127.0.0.1.
int FreePort();

// A server binary run by the benchmark and stopped (SIGTERM, then waited for) when this goes.
class ServerProcess {
 public:
  static absl::StatusOr<ServerProcess> Start(const std::string& binary,
                                             const std::vector<std::string>& args);
  ServerProcess(ServerProcess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }
  ServerProcess& operator=(ServerProcess&&) = delete;
  ~ServerProcess();
  bool Running();  // false once the server has exited

 private:
  explicit ServerProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
};

// The first of `candidates` that is an executable file, or "".
std::string FindBinary(const std::vector<std::string>& candidates);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_BUFFER_PEER_H_
