// The trajectory data model: one agent execution path with per-token provenance.
//
//   tokens     [ p p p | a a a a | o o o | a a | o ... ]   p: prompt, a: action, o: observation
//   trainable    0 0 0   1 1 1 1   0 0 0   1 1   0        only policy-generated tokens train
//   logprobs     - - -   x x x x   - - -   x x   -        behaviour log μ (NaN where absent)
//   versions    -1 ...   7 7 8 8  -1 ...   8 8  -1        policy version that sampled the token
//
// Trajectories are plain values; they are validated at every trust boundary (the buffer
// service, external environments, recorded agent histories) with Validate().
#ifndef FLYWHEEL_CORE_TRAJECTORY_H_
#define FLYWHEEL_CORE_TRAJECTORY_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flywheel {

// Who produced a path of an agent execution; also the selection priority order
// (main > main-summary > sub-agent > sub-agent-summary), lower value = higher priority.
enum class Role : int { kMain = 0, kMainSummary = 1, kSubAgent = 2, kSubAgentSummary = 3 };

// Why an episode ended.
enum class Termination : int {
  kDone = 0,      // the environment said done
  kMaxTurns = 1,  // the turn limit was reached
  kTimeout = 2,   // the wall-clock budget expired; reward comes from the partial score
  kEnvError = 3,  // the environment crashed or broke protocol
  kCancelled = 4  // the actor was told to stop (shutdown, worker moved to training)
};

std::string_view RoleName(Role role);
absl::StatusOr<Role> ParseRole(std::string_view name);
std::string_view TerminationName(Termination termination);
absl::StatusOr<Termination> ParseTermination(std::string_view name);

// Log-prob value for tokens that carry none (prompt and observation tokens).
inline constexpr float kNoLogprob = std::numeric_limits<float>::quiet_NaN();
// Version value for tokens the policy did not generate.
inline constexpr int64_t kNoVersion = -1;

struct Trajectory {
  std::string id;
  std::string execution_id;
  std::string group_id;
  std::string task_id;
  std::string env_name;
  Role role = Role::kMain;
  std::string parent_id;       // empty for a root path
  int64_t fork_position = -1;  // index in the parent's tokens where this path forks

  std::vector<int32_t> tokens;
  std::vector<uint8_t> trainable;  // 0/1 (not vector<bool>: contiguous, cheap to copy to tensors)
  std::vector<float> logprobs;
  std::vector<int64_t> versions;

  std::vector<int32_t> turn_ends;  // turn i covers tokens [turn_ends[i-1], turn_ends[i])
  std::vector<float> turn_rewards;
  float final_reward = 0.0f;
  std::optional<float> partial_score;  // progress score in [0, 1] when the episode timed out
  Termination termination = Termination::kDone;
  // Set when the trajectory records an agent execution as its LLM calls
  // (trajectory/execution_record.h): turn i is call i, its context then its generated tokens,
  // and call_roles[i] its role. Empty for a plain path.
  std::vector<Role> call_roles;

  std::string actor_id;
  int64_t created_unix_ns = 0;
  int64_t finished_unix_ns = 0;

  // Appends one token. Generated tokens must pass a log-prob and version.
  void AppendPrompt(int32_t token);
  void AppendGenerated(int32_t token, float logprob, int64_t version);

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t NumTrainable() const;
  // Smallest / largest policy version over generated tokens; kNoVersion if there are none.
  int64_t MinVersion() const;
  int64_t MaxVersion() const;

  // Checks internal consistency. `vocab_size` > 0 also bounds token ids. The error message
  // names the trajectory id and the offending field and index.
  absl::Status Validate(int64_t vocab_size = 0) const;

  std::string DebugString() const;

  friend bool operator==(const Trajectory& a, const Trajectory& b);
};

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_TRAJECTORY_H_
