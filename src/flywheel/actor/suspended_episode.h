// An episode taken off one actor at its last environment boundary, to continue on another:
// how a rollout cell that the elastic scheduler moves to training hands its in-flight episodes
// over without losing or repeating any (ARCHITECTURE.md, "Elastic scheduling").
//
//   actor A: Suspend()                               actor B: Adopt(episodes)
//   ──────────────────                               ────────────────────────
//   env call in flight  → its reply is awaited       new engine sequence over the whole token
//   policy turn running → abandoned at once, its       history (trajectory + the observation's
//                         partial tokens dropped       turn), prefilled by B's next Step
//   engine sequence freed                            StartTurn: the next policy turn, sampled
//        │                                             with B's weights
//        └── SuspendedEpisode{task, env, trajectory, observation, …} ──▶
//
// The boundary is "the environment has just replied with `observation`; the next policy turn has
// not begun". The trajectory ends with the last action the environment saw (it is empty before
// the first turn) and turn_ends / turn_rewards already include that reply. A policy turn that was
// running when the actor was suspended is not in it: the turn is generated again, whole, by the
// adopting actor. So one turn never mixes two actors' tokens, each token's version is that of
// the weights that sampled it, and the discarded tokens are in no trajectory (they were counted
// in the suspending actor's ActorStats::tokens_generated when sampled, and in tokens_discarded).
//
// An episode whose awaited environment reply ends it (done, error, max turns, an expired budget
// scored) finishes in place into the suspending actor's sink instead: it has nothing left to
// hand over.
#ifndef FLYWHEEL_ACTOR_SUSPENDED_EPISODE_H_
#define FLYWHEEL_ACTOR_SUSPENDED_EPISODE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/env/interface.h"

namespace flywheel {

struct SuspendedEpisode {
  TaskInstance task;
  // Owned: moves with the episode and keeps the environment's own state (the episode's progress,
  // a process lease). Reset has run and no call is in flight, so the adopter may call Step next.
  std::unique_ptr<Environment> env;
  // Everything up to the boundary: tokens, behaviour log-probs, versions, turn rewards, and the
  // ids (id, group_id, task_id, actor_id of the actor that started it) that stay the episode's
  // own wherever it finishes, so the buffer still assembles its group.
  Trajectory trajectory;
  // The environment's last reply (the reset's first observation, or a step's): it opens the next
  // policy turn.
  std::string observation;
  int64_t turns = 0;  // policy turns played; they count toward actor.max_turns
  double total_reward = 0;
  // Of actor.episode_time_budget_s, spent since the reset. The time an episode waits between
  // two actors is not charged to it.
  absl::Duration budget_used = absl::ZeroDuration();

  // What Adopt needs: an environment, and token arrays that agree (`vocab_size` > 0 also bounds
  // the token ids). The message names the trajectory.
  absl::Status Validate(int64_t vocab_size = 0) const;
  std::string DebugString() const;
};

// What taking an actor off rollout did (Actor::Suspend, Actor::Drain): one switch.
struct ActorSwitch {
  std::vector<SuspendedEpisode> episodes;  // to adopt elsewhere; always empty after Drain
  int64_t finished_in_place = 0;           // episodes that ended into this actor's sink meanwhile
  int64_t tokens_discarded = 0;            // generated in the abandoned policy turns
  absl::Duration elapsed = absl::ZeroDuration();  // from the call until Run let go of the episodes
};

// Cuts `t` back to its first `size` tokens (the start of the turn being abandoned). Turn ends and
// rewards are kept: they were recorded before that turn began.
void TruncateTrajectory(Trajectory& t, int64_t size);

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_SUSPENDED_EPISODE_H_
