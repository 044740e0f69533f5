// The role switches of an elastic job's satellites, as measured, and their summary (the
// "elastic" section of summary.json: count, p50 and max seconds per direction).
#ifndef FLYWHEEL_ELASTIC_ELASTIC_SWITCHES_H_
#define FLYWHEEL_ELASTIC_ELASTIC_SWITCHES_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace flywheel {

// One measured role change of a satellite.
struct SwitchRecord {
  int satellite = 0;
  bool to_train = false;
  double seconds = 0;           // decision → the cell working in its new role
  int64_t episodes_handed = 0;  // to_train: suspended there and adopted elsewhere (or parked)
  int64_t finished_in_place = 0;
  double at = 0;  // seconds since the job's start

  // The scheduler.jsonl line of this switch.
  nlohmann::json ToJson() const;
  // With run.trace on: the switch as a span of the calling thread's "scheduler" track, ending
  // at `end_ns` (TraceRecorder::NowNanos()) and lasting `seconds`.
  void Trace(int64_t end_ns) const;
};

// Counts the switch in the metrics registry (Prometheus): scheduler.switches{to=…},
// scheduler.switch_seconds{to=…} and the satellite's role, scheduler.satellite_training.
void RecordSwitchMetrics(const SwitchRecord& record);

// {"count", "p50_s", "max_s", "episodes_handed"} over the switches in one direction.
nlohmann::json SwitchStats(const std::vector<SwitchRecord>& switches, bool to_train);

}  // namespace flywheel

#endif  // FLYWHEEL_ELASTIC_ELASTIC_SWITCHES_H_
