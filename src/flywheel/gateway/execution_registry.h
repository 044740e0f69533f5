// The agent executions a gateway is recording: each opened with a secret token (an agent can
// call, and write, only as its own execution), its LLM calls appended as they complete, and
// handed whole to a sink when it finishes (a JSONL call log, or the trajectory processor).
//
//   Open() ──▶ {execution_id, token} ──▶ agent: Authorization: Bearer <token>
//   Record(id, call) ×N     (calls of one execution may run concurrently: sub-agents)
//   Finish(id, outcome) ──▶ sink(Execution)   (then the id is closed: later calls NotFound)
//
// Thread-safe.
#ifndef FLYWHEEL_GATEWAY_EXECUTION_REGISTRY_H_
#define FLYWHEEL_GATEWAY_EXECUTION_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel::gateway {

struct ExecutionStart {
  std::string execution_id;  // empty: the registry names it
  std::string group_id;      // empty: the execution is a group of its own
  std::string task_id;
  std::string env_name;
};

struct OpenedExecution {
  std::string execution_id;
  std::string token;
};

// How an execution ended, as its harness reports it.
struct ExecutionOutcome {
  Termination termination = Termination::kDone;
  std::optional<float> final_reward;
  std::optional<float> partial_score;
};

struct ExecutionCounts {
  int64_t opened = 0;
  int64_t finished = 0;
  int64_t calls = 0;
  int64_t refused_tokens = 0;  // calls with a wrong or missing token
  int64_t dropped = 0;         // closed with nothing to train on (Drop)
};

class ExecutionRegistry {
 public:
  // Receives every finished execution, outside the registry's lock; an error is returned to the
  // caller of Finish (the execution is then gone: the sink must not lose what it accepted).
  using Sink = std::function<absl::Status(Execution)>;
  explicit ExecutionRegistry(Sink sink);

  // AlreadyExists for an id that is open or was finished; InvalidArgument for an id that a URL
  // path cannot carry.
  absl::StatusOr<OpenedExecution> Open(ExecutionStart start) ABSL_LOCKS_EXCLUDED(mu_);
  // NotFound (never opened, or finished) or PermissionDenied (the token is not its own).
  absl::Status Authorize(std::string_view execution_id, std::string_view token)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Appends a call (its call_id is set here: c1, c2, … in order of completion).
  absl::Status Record(std::string_view execution_id, LlmCall call) ABSL_LOCKS_EXCLUDED(mu_);
  // The `last` calls recorded so far (copies, oldest first), for matching a new call's context.
  absl::StatusOr<std::vector<LlmCall>> Calls(std::string_view execution_id,
                                             size_t last = SIZE_MAX) const ABSL_LOCKS_EXCLUDED(mu_);
  // The execution's group (its own id when it was opened without one).
  absl::StatusOr<std::string> GroupId(std::string_view execution_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Validates the outcome (a done execution needs a final reward, a timed-out one a reward or a
  // partial score), closes the execution and hands it to the sink.
  absl::StatusOr<Execution> Finish(std::string_view execution_id, const ExecutionOutcome& outcome)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The open executions opened before `deadline` (their time budget has run out).
  std::vector<std::string> OpenedBefore(absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);
  // Closes an execution that cannot be finished (no call, no score), keeping nothing; its id is
  // not reused. NotFound when it is not open.
  absl::Status Drop(std::string_view execution_id) ABSL_LOCKS_EXCLUDED(mu_);

  ExecutionCounts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Open_ {
    std::string token;
    Execution execution;
    absl::Time opened;
  };

  const Sink sink_;
  const std::string incarnation_;  // distinguishes the ids of two gateway runs

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Open_> open_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> finished_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  ExecutionCounts counts_ ABSL_GUARDED_BY(mu_);
};

// True for ids a URL path segment carries as they are: [A-Za-z0-9._:-], 1 to 128 characters.
bool IsValidExecutionId(std::string_view id);

}  // namespace flywheel::gateway

#endif  // FLYWHEEL_GATEWAY_EXECUTION_REGISTRY_H_
