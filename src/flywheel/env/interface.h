// The agent–environment interface.
//
// One Environment object serves one episode at a time (reset, steps, close), and its methods
// are never called concurrently: the actor serialises calls per episode, so implementations
// need not be thread-safe. Calls are synchronous compute; the waiting that makes environments
// slow (latency models, tool calls) is reported in StepResult::latency and served by
// EnvExecutor's timer queue, so hundreds of waiting episodes hold no thread.
//
//   actor ──StartStep(env, action, cb)──▶ EnvExecutor ──worker──▶ env->Step(action)
//                                              │ timer queue: completes at now + latency
//   actor ◀────────── cb(StepResult) ─────────┘
#ifndef FLYWHEEL_ENV_INTERFACE_H_
#define FLYWHEEL_ENV_INTERFACE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "flywheel/env/vocabulary.h"

namespace flywheel {

// One task instance. The G rollouts of a group share `seed` (hence the same instance) and
// differ in `rollout`.
struct TaskInstance {
  std::string task;     // environment name, e.g. "guess"
  uint64_t seed = 0;    // determines the instance
  int64_t group = 0;    // index of the group this rollout belongs to
  int64_t rollout = 0;  // index within the group, 0..G-1
};

// Why an episode ended. Misbehaving environments end episodes, never training.
enum class EpisodeEnd {
  kRunning,        // not ended
  kDone,           // the environment said done
  kTimeout,        // a step exceeded its limit or the budget expired; scored partially
  kEnvError,       // the environment crashed or refused; restarted for the next episode
  kProtocolError,  // the environment's output was not valid protocol
};
std::string_view EpisodeEndName(EpisodeEnd end);

struct StepResult {
  std::string observation;
  double reward = 0;
  bool done = false;
  // Progress so far in [0, 1] when the environment can tell (e.g. fraction of tests passing).
  std::optional<double> partial_score;
  EpisodeEnd end = EpisodeEnd::kRunning;  // kDone when done normally; an error otherwise
  std::string error;                      // what went wrong, quoting the environment
  // Set when the action called a tool (calc's "CALL calc …"): the latency wrapper charges the
  // tool's latency model instead of the step's.
  std::string tool;
  // Time this step takes beyond its compute: added by the latency wrapper, waited by the
  // executor (or charged to a virtual clock).
  absl::Duration latency = absl::ZeroDuration();
  bool truncated = false;  // the observation was cut to max_observation_bytes

  // An episode-ending failure (done, reward 0) carrying `end` and `error`.
  static StepResult Failure(EpisodeEnd end, std::string error,
                            std::optional<double> partial_score = std::nullopt);
};

class Environment {
 public:
  virtual ~Environment() = default;

  // Starts an episode of `task`; the result carries the first observation (reward 0).
  // Calling Reset again starts a new episode on the same object.
  virtual absl::StatusOr<StepResult> Reset(const TaskInstance& task) = 0;
  // Applies one action. Errors are for misuse (step without reset); a misbehaving environment
  // returns a StepResult with done = true and `end` saying why.
  virtual absl::StatusOr<StepResult> Step(std::string_view action) = 0;
  // Progress of the current episode in [0, 1], asked when its time budget expires.
  virtual absl::StatusOr<double> ScorePartial() = 0;
  // Ends the episode and releases what it holds (a process lease). Idempotent.
  virtual void Close() {}

  // Reset may need a resource that episodes share (an idle copy of an external environment's
  // process). AwaitResources calls `ready` once this environment holds one, so that Reset then runs
  // without waiting: at once when nothing is shared (the default), otherwise when another episode
  // releases it. An episode waiting here holds no thread, so more episodes than copies is an
  // ordinary configuration. `ready` may run on any thread and must be short. Without a prior
  // AwaitResources, Reset waits for the resource itself.
  virtual void AwaitResources(absl::AnyInvocable<void(absl::Status)> ready) {
    ready(absl::OkStatus());
  }
  // Ends a pending AwaitResources now: its `ready` gets CANCELLED before this returns, unless it
  // was already called (or is being called on another thread). A no-op without one.
  virtual void CancelAwait() {}

  virtual const VocabularySpec& vocabulary() const = 0;
  virtual std::string DebugString() const = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_ENV_INTERFACE_H_
