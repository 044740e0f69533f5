// The policy behind an agent harness's LLM calls: given the tokens a call sends and which agent
// it serves, return the tokens generated, each with its behaviour log-prob and policy version.
//
//   harness ── HarnessRequest{role, context, attempt, sub-agent, test report} ──▶ policy
//           ◀── HarnessTurn{generated, logprobs, versions} ─────────────────────
//
// Implementations: the scripted repair agent (repair_harness.h: the task's expert with noise,
// synthetic log-probs, version 0) and a transformer sampled by the rollout engine
// (actor/engine_harness_policy.h: real log-probs and versions). A policy serves one harness
// run at a time; its methods are not called concurrently.
#ifndef FLYWHEEL_TRAJECTORY_HARNESS_POLICY_H_
#define FLYWHEEL_TRAJECTORY_HARNESS_POLICY_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"

namespace flywheel {

struct HarnessRequest {
  Role role = Role::kMain;
  std::span<const int32_t> context;  // the tokens sent, BOS first
  int attempt = 0;                   // main: retries taken so far (0 = first attempt)
  int subagent = -1;                 // sub-agent calls: which sub-agent (0-based); -1 otherwise
  // The latest test report the harness saw. A model reads its context instead; the scripted
  // agent's summaries state it.
  std::string_view test_report;
};

struct HarnessTurn {
  std::vector<int32_t> generated;  // ends with the end-of-turn token unless cut off
  std::vector<float> logprobs;     // behaviour log μ, one per generated token
  std::vector<int64_t> versions;   // policy version, one per generated token
};

class HarnessPolicy {
 public:
  virtual ~HarnessPolicy() = default;
  virtual absl::StatusOr<HarnessTurn> Generate(const HarnessRequest& request) = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_HARNESS_POLICY_H_
