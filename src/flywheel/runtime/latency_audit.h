// Where a run's time went, and whether the actors kept the learner fed.
//
// The learner is fed when it waited for data at most `fed_wait_fraction` of the wall time.
// When it was not, more episodes in flight help as long as the actors are latency-bound
// (waiting on environments): by Little's law, throughput grows with concurrency, so the
// concurrency needed is the current one times demand / supply, where demand is the rate the
// learner consumes samples while busy and supply the rate the actors produced them.
#ifndef FLYWHEEL_RUNTIME_LATENCY_AUDIT_H_
#define FLYWHEEL_RUNTIME_LATENCY_AUDIT_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace flywheel {

struct LatencyAuditInput {
  double wall_seconds = 0;
  double learner_busy_seconds = 0;  // forward, backward, optimiser
  double learner_wait_seconds = 0;  // blocked on the buffer
  int64_t actor_threads = 1;
  double generation_seconds = 0;    // summed over actor threads: model forward for decoding
  double env_wait_seconds = 0;      // summed over episodes: waiting on environments
  double insert_wait_seconds = 0;   // summed over actor threads: blocked by backpressure
  int64_t episodes_in_flight = 1;   // configured concurrency over all actors
  int64_t samples_consumed = 0;
  int64_t samples_produced = 0;
};

struct LatencyAudit {
  LatencyAuditInput input;
  double learner_utilization = 0;     // busy / wall
  double learner_wait_fraction = 0;   // wait / wall
  double generation_utilization = 0;  // generation / (actor threads × wall)
  bool learner_fed = false;
  bool generation_bound = false;      // actors busy decoding: more episodes will not help
  int64_t suggested_episodes_in_flight = 0;  // 0 when the learner was fed

  std::string Verdict() const;
  nlohmann::json ToJson() const;
};

LatencyAudit AuditLatency(const LatencyAuditInput& input, double fed_wait_fraction = 0.05);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_LATENCY_AUDIT_H_
