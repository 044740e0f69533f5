#include "flywheel/trajectory/llm_call.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "flywheel/core/strings.h"

namespace flywheel {

absl::Status LlmCall::Validate(const std::string& execution_id, int64_t vocab_size) const {
  auto error = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        StrCat("execution '", execution_id, "' call '", call_id, "': ", what));
  };
  if (context.empty() && generated.empty()) return error("call has no tokens");
  if (logprobs.size() != generated.size()) {
    return error(StrCat("logprobs has ", logprobs.size(), " entries but generated has ",
                        generated.size()));
  }
  if (versions.size() != generated.size()) {
    return error(StrCat("versions has ", versions.size(), " entries but generated has ",
                        generated.size()));
  }
  auto check_token = [&](int32_t token, std::string_view field, size_t i) -> absl::Status {
    if (token < 0 || (vocab_size > 0 && token >= vocab_size)) {
      return error(StrCat(field, "[", i, "]: token id ", token, " outside the vocabulary [0, ",
                          vocab_size, ")"));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < context.size(); ++i) {
    if (auto s = check_token(context[i], "context", i); !s.ok()) return s;
  }
  for (size_t i = 0; i < generated.size(); ++i) {
    if (auto s = check_token(generated[i], "generated", i); !s.ok()) return s;
    if (!std::isfinite(logprobs[i]) || logprobs[i] > 1e-3f) {
      return error(StrCat("logprobs[", i, "]: ", logprobs[i], " is not a finite value <= 0"));
    }
    if (versions[i] < 0) return error(StrCat("versions[", i, "]: negative policy version"));
  }
  if (end_unix_ns != 0 && end_unix_ns < start_unix_ns) {
    return error("end_unix_ns is earlier than start_unix_ns");
  }
  return absl::OkStatus();
}

absl::Status Execution::Validate(int64_t vocab_size) const {
  if (execution_id.empty()) return absl::InvalidArgumentError("execution with an empty id");
  if (calls.empty()) {
    return absl::InvalidArgumentError(StrCat("execution '", execution_id, "' has no calls"));
  }
  for (const LlmCall& call : calls) {
    if (auto s = call.Validate(execution_id, vocab_size); !s.ok()) return s;
  }
  auto finite = [](const std::optional<float>& v) { return !v || std::isfinite(*v); };
  if (!finite(final_reward) || !finite(partial_score)) {
    return absl::InvalidArgumentError(
        StrCat("execution '", execution_id, "': reward or partial score is not finite"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecutionReward> RewardOf(const Execution& e) {
  if (e.termination == Termination::kTimeout) {
    if (e.partial_score) return ExecutionReward{*e.partial_score, true};
    if (e.final_reward) return ExecutionReward{*e.final_reward, false};
    return absl::FailedPreconditionError(
        StrCat("execution '", e.execution_id,
               "' timed out without a partial score: ask the environment to score it "
               "(score_partial) instead of dropping the reward"));
  }
  if (e.final_reward) return ExecutionReward{*e.final_reward, false};
  if (e.partial_score) return ExecutionReward{*e.partial_score, true};
  return absl::FailedPreconditionError(StrCat("execution '", e.execution_id, "' (",
                                              TerminationName(e.termination),
                                              ") has neither a final reward nor a partial score"));
}

VersionRange BehaviourVersions(const std::vector<Execution>& executions) {
  std::optional<VersionRange> range;
  for (const Execution& e : executions) {
    for (const LlmCall& c : e.calls) {
      for (int64_t v : c.versions) {
        if (!range) range = VersionRange{v, v};
        range->min = std::min(range->min, v);
        range->max = std::max(range->max, v);
      }
    }
  }
  return range.value_or(VersionRange{});
}

}  // namespace flywheel
