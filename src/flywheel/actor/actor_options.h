// Knobs of an actor: the [actor] section of a job config (sampling is the [sampling] section,
// shared with the learner, which must score tokens under the same distribution).
#ifndef FLYWHEEL_ACTOR_ACTOR_OPTIONS_H_
#define FLYWHEEL_ACTOR_ACTOR_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "flywheel/actor/rollout_options.h"
#include "flywheel/core/config.h"

namespace flywheel {

struct ActorOptions {
  int64_t num_actors = 1;            // actor threads, each with its own rollout engine
  int64_t episodes_in_flight = 32;   // concurrent episodes per actor
  int64_t group_size = 8;            // G rollouts of each task instance
  int64_t max_turns = 8;             // policy turns per episode
  int64_t max_new_tokens = 8;        // tokens per policy turn
  double episode_time_budget_s = 0;  // wall-clock budget per episode; 0 = none
  RolloutEngineOptions engine;  // its keys sit in [actor] too

  template <typename V>
  void VisitFields(V& v) {
    v.Field("num_actors", num_actors, "actor threads, each with its own rollout engine");
    v.Field("episodes_in_flight", episodes_in_flight, "concurrent episodes per actor");
    v.Field("group_size", group_size, "rollouts per task instance (G)");
    v.Field("max_turns", max_turns, "policy turns per episode");
    v.Field("max_new_tokens", max_new_tokens, "tokens per policy turn");
    v.Field("episode_time_budget_s", episode_time_budget_s,
            "episode wall-clock budget; then the partial score counts (0 = none)");
    engine.VisitFields(v);
  }

  absl::Status Validate() const {
    if (num_actors < 1) return absl::InvalidArgumentError("actor.num_actors must be >= 1");
    if (episodes_in_flight < 1) {
      return absl::InvalidArgumentError("actor.episodes_in_flight must be >= 1");
    }
    if (group_size < 1) return absl::InvalidArgumentError("actor.group_size must be >= 1");
    if (max_turns < 1 || max_new_tokens < 1) {
      return absl::InvalidArgumentError("actor.max_turns and actor.max_new_tokens must be >= 1");
    }
    if (episode_time_budget_s < 0) {
      return absl::InvalidArgumentError("actor.episode_time_budget_s must be >= 0");
    }
    return engine.Validate();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ACTOR_OPTIONS_H_
