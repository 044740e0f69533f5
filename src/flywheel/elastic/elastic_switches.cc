#include "flywheel/elastic/elastic_switches.h"

#include <algorithm>

#include "flywheel/core/metrics.h"
#include "flywheel/core/strings.h"
#include "flywheel/observe/trace_recorder.h"

namespace flywheel {
namespace {

// p-th quantile (0..1) of `values` (nearest rank); 0 when empty.
double Quantile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t k = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[k];
}

}  // namespace

nlohmann::json SwitchRecord::ToJson() const {
  return {{"event", "switch"},
          {"satellite", satellite},
          {"to", to_train ? "train" : "rollout"},
          {"seconds", seconds},
          {"episodes_handed", episodes_handed},
          {"finished_in_place", finished_in_place},
          {"at_s", at}};
}

void RecordSwitchMetrics(const SwitchRecord& record) {
  MetricsRegistry& r = MetricsRegistry::Global();
  const std::string_view to = record.to_train ? "train" : "rollout";
  r.GetCounter(StrCat("scheduler.switches{to=", to, "}"), "satellite role switches, by new role")
      ->Increment();
  r.GetHistogram(StrCat("scheduler.switch_seconds{to=", to, "}"), SecondsBounds(),
                 "role switch time, decision to working in the new role")
      ->Observe(record.seconds);
  r.GetGauge(StrCat("scheduler.satellite_training{satellite=", record.satellite, "}"),
             "1 while the satellite trains, 0 while it rolls out")
      ->Set(record.to_train ? 1 : 0);
}

void SwitchRecord::Trace(int64_t end_ns) const {
  const auto duration = static_cast<int64_t>(seconds * 1e9);
  TraceRecorder::Global().Record("scheduler", to_train ? "switch to train" : "switch to rollout",
                                 end_ns - duration, end_ns);
}

nlohmann::json SwitchStats(const std::vector<SwitchRecord>& switches, bool to_train) {
  std::vector<double> seconds;
  int64_t handed = 0;
  for (const SwitchRecord& s : switches) {
    if (s.to_train != to_train) continue;
    seconds.push_back(s.seconds);
    handed += s.episodes_handed;
  }
  return {{"count", seconds.size()},
          {"p50_s", Quantile(seconds, 0.5)},
          {"max_s", seconds.empty() ? 0.0 : *std::max_element(seconds.begin(), seconds.end())},
          {"episodes_handed", handed}};
}

}  // namespace flywheel
