#include "flywheel/gateway/env_sessions.h"

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel::gateway {
namespace {

// FNV-1a: the same instance for a group in every gateway process and run (absl::Hash is seeded
// per process, so a restarted gateway would give a group another task).
uint64_t StableHash(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

EnvSessions::~EnvSessions() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, episode] : episodes_) {
    absl::MutexLock episode_lock(&episode->mu);
    if (episode->env != nullptr) episode->env->Close();
  }
}

std::shared_ptr<EnvSessions::Episode> EnvSessions::Find(const std::string& execution_id) {
  absl::MutexLock lock(&mu_);
  auto it = episodes_.find(execution_id);
  return it == episodes_.end() ? nullptr : it->second;
}

absl::StatusOr<StepResult> EnvSessions::Reset(const std::string& execution_id,
                                              const std::string& group_id,
                                              std::optional<uint64_t> seed) {
  std::shared_ptr<Episode> episode;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Episode>& slot = episodes_[execution_id];
    if (slot == nullptr) slot = std::make_shared<Episode>();
    episode = slot;
  }
  absl::MutexLock lock(&episode->mu);
  if (episode->env == nullptr) episode->env = factory_->NewEnvironment();
  TaskInstance task;
  task.task = factory_->task_name();
  // The executions of a group play one instance: their rewards are compared with each other.
  task.seed = seed ? *seed : StableHash(group_id.empty() ? execution_id : group_id);
  ASSIGN_OR_RETURN(StepResult first, episode->env->Reset(task));
  episode->reward = 0;
  episode->done = first.done;
  episode->end = first.end;
  return first;
}

absl::StatusOr<StepResult> EnvSessions::Step(const std::string& execution_id,
                                             std::string_view action) {
  std::shared_ptr<Episode> episode = Find(execution_id);
  if (episode == nullptr) {
    return absl::FailedPreconditionError(StrCat(
        "execution '", execution_id, "' has no episode: POST /", execution_id, "/env/reset first"));
  }
  absl::MutexLock lock(&episode->mu);
  if (episode->done) {
    return absl::FailedPreconditionError(
        StrCat("execution '", execution_id, "''s episode has ended: finish the execution"));
  }
  ASSIGN_OR_RETURN(StepResult result, episode->env->Step(action));
  episode->reward += result.reward;
  episode->done = result.done;
  episode->end = result.end;
  return result;
}

std::optional<ExecutionOutcome> EnvSessions::Outcome(const std::string& execution_id) {
  std::shared_ptr<Episode> episode = Find(execution_id);
  if (episode == nullptr) return std::nullopt;
  ExecutionOutcome outcome;
  {
    absl::MutexLock lock(&episode->mu);
    outcome.final_reward = static_cast<float>(episode->reward);
    if (!episode->done) {
      // The agent stopped before the task ended: its progress is the score, as for an episode
      // whose time budget expired.
      outcome.termination = Termination::kTimeout;
      absl::StatusOr<double> partial = episode->env->ScorePartial();
      if (partial.ok()) outcome.partial_score = static_cast<float>(*partial);
    } else if (episode->end != EpisodeEnd::kDone) {
      outcome.termination = Termination::kEnvError;
    }
  }
  return outcome;
}

void EnvSessions::Close(const std::string& execution_id) {
  std::shared_ptr<Episode> episode;
  {
    absl::MutexLock lock(&mu_);
    auto it = episodes_.find(execution_id);
    if (it == episodes_.end()) return;
    episode = std::move(it->second);
    episodes_.erase(it);
  }
  absl::MutexLock lock(&episode->mu);
  episode->env->Close();
}

}  // namespace flywheel::gateway
