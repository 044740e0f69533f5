// The job's environment, reachable by agents through the gateway, so that the task scores an
// execution rather than the agent that played it (an agent's own claim of success is what reward
// hacking exploits). Each execution may hold one episode:
//
//   POST /{id}/env/reset  {"seed"?}      ─▶ Reset(task)      ─▶ {"observation", "task"}
//   POST /{id}/env/step   {"action"}     ─▶ Step(action)     ─▶ {"observation", "reward", "done"}
//   POST /{id}/finish     (no reward)    ─▶ Outcome(id): the episode's reward; an episode not done
//                                           ends as a timeout scored by ScorePartial; Close(id)
//
// The instance is the request's seed, else one derived from the execution's group, so that the
// executions of a group (a GRPO group) play the same task. Environments come from the job's
// EnvFactory (its latency models included: a step takes as long as it would in training).
// Thread-safe; the steps of one execution run one at a time.
#ifndef FLYWHEEL_GATEWAY_ENV_SESSIONS_H_
#define FLYWHEEL_GATEWAY_ENV_SESSIONS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/gateway/execution_registry.h"

namespace flywheel::gateway {

class EnvSessions {
 public:
  // `factory` is borrowed and must outlive the sessions.
  explicit EnvSessions(const EnvFactory* factory) : factory_(factory) {}
  ~EnvSessions();

  // Starts (or restarts) the execution's episode on instance `seed`, else one derived from
  // `group_id`.
  absl::StatusOr<StepResult> Reset(const std::string& execution_id, const std::string& group_id,
                                   std::optional<uint64_t> seed) ABSL_LOCKS_EXCLUDED(mu_);
  // FailedPrecondition before a reset or after the episode ended.
  absl::StatusOr<StepResult> Step(const std::string& execution_id, std::string_view action)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the execution has an episode (its environment scores it).
  bool Playing(const std::string& execution_id) ABSL_LOCKS_EXCLUDED(mu_) {
    return Find(execution_id) != nullptr;
  }
  // The outcome the execution finishes with; nullopt when it has no episode (its agent reports
  // the reward itself).
  std::optional<ExecutionOutcome> Outcome(const std::string& execution_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the execution's episode (after its finish was accepted). A no-op without one.
  void Close(const std::string& execution_id) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& task_name() const { return factory_->task_name(); }

 private:
  struct Episode {
    absl::Mutex mu;  // one step of the execution at a time
    std::unique_ptr<Environment> env ABSL_GUARDED_BY(mu);
    double reward ABSL_GUARDED_BY(mu) = 0;
    bool done ABSL_GUARDED_BY(mu) = false;
    EpisodeEnd end ABSL_GUARDED_BY(mu) = EpisodeEnd::kRunning;
  };
  std::shared_ptr<Episode> Find(const std::string& execution_id) ABSL_LOCKS_EXCLUDED(mu_);

  const EnvFactory* const factory_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Episode>> episodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flywheel::gateway

#endif  // FLYWHEEL_GATEWAY_ENV_SESSIONS_H_
