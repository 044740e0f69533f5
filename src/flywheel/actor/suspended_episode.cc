#include "flywheel/actor/suspended_episode.h"

#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status SuspendedEpisode::Validate(int64_t vocab_size) const {
  const std::string& id = trajectory.id;
  if (env == nullptr) {
    return absl::InvalidArgumentError(StrCat(
        "suspended episode '", id, "' has no environment: its env object must move with it"));
  }
  if (turns < 0) {
    return absl::InvalidArgumentError(
        StrCat("suspended episode '", id, "': turns is ", turns, " (must be >= 0)"));
  }
  // Before its first policy turn an episode has no tokens yet, which Trajectory::Validate refuses.
  if (trajectory.tokens.empty()) {
    if (!trajectory.trainable.empty() || !trajectory.logprobs.empty() ||
        !trajectory.versions.empty() || !trajectory.turn_ends.empty()) {
      return absl::InvalidArgumentError(StrCat(
          "suspended episode '", id, "': no tokens, but per-token or per-turn fields are set"));
    }
    return id.empty() ? absl::InvalidArgumentError("suspended episode: trajectory id is empty")
                      : absl::OkStatus();
  }
  return trajectory.Validate(vocab_size);
}

std::string SuspendedEpisode::DebugString() const {
  return StrCat("SuspendedEpisode(", trajectory.id, ", tokens=", trajectory.size(),
                ", turns=", turns, ", budget_used=", absl::FormatDuration(budget_used),
                ", observation='", observation, "')");
}

void TruncateTrajectory(Trajectory& t, int64_t size) {
  if (size >= t.size()) return;
  t.tokens.resize(size);
  t.trainable.resize(size);
  t.logprobs.resize(size);
  t.versions.resize(size);
}

}  // namespace flywheel
