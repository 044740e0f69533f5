#include "flywheel/runtime/latency_audit.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace flywheel {

LatencyAudit AuditLatency(const LatencyAuditInput& in, double fed_wait_fraction) {
  LatencyAudit a;
  a.input = in;
  if (in.wall_seconds <= 0) return a;
  a.learner_utilization = in.learner_busy_seconds / in.wall_seconds;
  a.learner_wait_fraction = in.learner_wait_seconds / in.wall_seconds;
  a.generation_utilization =
      in.generation_seconds / (std::max<int64_t>(in.actor_threads, 1) * in.wall_seconds);
  a.learner_fed = a.learner_wait_fraction <= fed_wait_fraction;
  a.generation_bound = a.generation_utilization >= 0.9;
  if (!a.learner_fed && in.samples_produced > 0 && in.learner_busy_seconds > 0) {
    const double demand = in.samples_consumed / in.learner_busy_seconds;
    const double supply = in.samples_produced / in.wall_seconds;
    a.suggested_episodes_in_flight = static_cast<int64_t>(
        std::ceil(std::max<int64_t>(in.episodes_in_flight, 1) * demand / supply));
  }
  return a;
}

std::string LatencyAudit::Verdict() const {
  if (learner_fed) {
    return fmt::format("the actors kept the learner fed (it waited {:.1f}% of the time)",
                       100 * learner_wait_fraction);
  }
  if (generation_bound) {
    return fmt::format(
        "the learner waited {:.1f}% of the time and the actors were busy decoding {:.0f}% of "
        "theirs: add actor threads or workers (more episodes in flight will not help)",
        100 * learner_wait_fraction, 100 * generation_utilization);
  }
  return fmt::format(
      "the learner waited {:.1f}% of the time; about {} episodes in flight (now {}) would have "
      "kept it fed",
      100 * learner_wait_fraction, suggested_episodes_in_flight, input.episodes_in_flight);
}

nlohmann::json LatencyAudit::ToJson() const {
  return {{"wall_seconds", input.wall_seconds},
          {"learner_busy_seconds", input.learner_busy_seconds},
          {"learner_wait_seconds", input.learner_wait_seconds},
          {"generation_seconds", input.generation_seconds},
          {"env_wait_seconds", input.env_wait_seconds},
          {"insert_wait_seconds", input.insert_wait_seconds},
          {"learner_utilization", learner_utilization},
          {"learner_wait_fraction", learner_wait_fraction},
          {"generation_utilization", generation_utilization},
          {"learner_fed", learner_fed},
          {"generation_bound", generation_bound},
          {"episodes_in_flight", input.episodes_in_flight},
          {"suggested_episodes_in_flight", suggested_episodes_in_flight},
          {"verdict", Verdict()}};
}

}  // namespace flywheel
