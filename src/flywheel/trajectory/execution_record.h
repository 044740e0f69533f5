// An agent execution (its LLM calls, llm_call.h) as one Trajectory, so that the tree job's
// actors send executions through the buffer like any other trajectory (staleness, groups,
// backpressure) and the learner turns them back into calls to build their trees:
//
//   calls      [ctx₁ | gen₁]  [ctx₂ | gen₂]  …
//   tokens      ctx₁ gen₁      ctx₂ gen₂      …     turn i = call i (turn_ends mark the calls)
//   trainable   0…0  1…1       0…0  1…1             generated tokens, with log μ and version
//   call_roles  role₁          role₂
//
// Each call's context is kept whole, as a proxy records it: the prefix sharing is found by the
// learner's trees, not by the encoding. What does not travel: call ids (decoded as
// "<execution id>-<index>", the harness's own naming) and call times (decoded as the recorded
// order, start = end = index: path selection, which breaks ties by start time, then follows the
// order of the record, a proxy's order of calls). The reward travels as the one the execution
// trains with (RewardOf), with the partial score and termination kept.
#ifndef FLYWHEEL_TRAJECTORY_EXECUTION_RECORD_H_
#define FLYWHEEL_TRAJECTORY_EXECUTION_RECORD_H_

#include <string>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel {

// Errors: an execution without a reward to train with (RewardOf), or one Validate refuses.
// `actor_id` is recorded as the trajectory's producer; the trajectory id is the execution id.
absl::StatusOr<Trajectory> ExecutionToTrajectory(const Execution& execution,
                                                 const std::string& actor_id);

// Errors name the trajectory and the call: a trajectory without call_roles (a plain path), or
// a call whose context follows one of its generated tokens.
absl::StatusOr<Execution> TrajectoryToExecution(const Trajectory& trajectory);

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_EXECUTION_RECORD_H_
