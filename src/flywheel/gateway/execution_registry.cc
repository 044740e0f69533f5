#include "flywheel/gateway/execution_registry.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel::gateway {
namespace {

// 128 bits from the operating system's entropy (std::random_device reads /dev/urandom): a token
// another local process cannot guess.
std::string NewToken() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) token += absl::StrFormat("%08x", device());
  return token;
}

}  // namespace

bool IsValidExecutionId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

ExecutionRegistry::ExecutionRegistry(Sink sink)
    : sink_(std::move(sink)),
      incarnation_(absl::StrFormat("%x", absl::ToUnixMillis(absl::Now()) % 0xffffff)) {}

absl::StatusOr<OpenedExecution> ExecutionRegistry::Open(ExecutionStart start) {
  absl::MutexLock lock(&mu_);
  if (start.execution_id.empty()) {
    start.execution_id = StrCat("gw", incarnation_, "-", next_id_++);
  } else if (!IsValidExecutionId(start.execution_id)) {
    return absl::InvalidArgumentError(
        StrCat("execution_id '", start.execution_id,
               "' must be 1 to 128 characters of A-Z a-z 0-9 . _ : - (it is part of a URL)"));
  }
  if (open_.contains(start.execution_id) || finished_.contains(start.execution_id)) {
    return absl::AlreadyExistsError(
        StrCat("execution '", start.execution_id, "' already exists on this gateway"));
  }
  Open_ entry;
  entry.token = NewToken();
  entry.opened = absl::Now();
  entry.execution.execution_id = start.execution_id;
  entry.execution.group_id = start.group_id.empty() ? start.execution_id : start.group_id;
  entry.execution.task_id = std::move(start.task_id);
  entry.execution.env_name = std::move(start.env_name);
  OpenedExecution opened{start.execution_id, entry.token};
  open_.emplace(start.execution_id, std::move(entry));
  ++counts_.opened;
  return opened;
}

absl::Status ExecutionRegistry::Authorize(std::string_view execution_id, std::string_view token) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(std::string(execution_id));
  if (it == open_.end()) {
    ++counts_.refused_tokens;
    return absl::NotFoundError(
        StrCat("execution '", execution_id, "' is not open on this gateway",
               finished_.contains(std::string(execution_id)) ? " (it finished)" : ""));
  }
  if (token.empty() || token != it->second.token) {
    ++counts_.refused_tokens;
    return absl::PermissionDeniedError(
        StrCat("the API key is not execution '", execution_id,
               "''s token (each execution has its own; see its OPENAI_API_KEY)"));
  }
  return absl::OkStatus();
}

absl::Status ExecutionRegistry::Record(std::string_view execution_id, LlmCall call) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(std::string(execution_id));
  if (it == open_.end()) {
    return absl::NotFoundError(StrCat("execution '", execution_id, "' is not open"));
  }
  std::vector<LlmCall>& calls = it->second.execution.calls;
  call.call_id = StrCat("c", calls.size() + 1);
  calls.push_back(std::move(call));
  ++counts_.calls;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LlmCall>> ExecutionRegistry::Calls(std::string_view execution_id,
                                                              size_t last) const {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(std::string(execution_id));
  if (it == open_.end()) {
    return absl::NotFoundError(StrCat("execution '", execution_id, "' is not open"));
  }
  const std::vector<LlmCall>& calls = it->second.execution.calls;
  return std::vector<LlmCall>(
      calls.end() - static_cast<std::ptrdiff_t>(std::min(last, calls.size())), calls.end());
}

absl::StatusOr<std::string> ExecutionRegistry::GroupId(std::string_view execution_id) const {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(std::string(execution_id));
  if (it == open_.end()) {
    return absl::NotFoundError(StrCat("execution '", execution_id, "' is not open"));
  }
  return it->second.execution.group_id;
}

absl::StatusOr<Execution> ExecutionRegistry::Finish(std::string_view execution_id,
                                                    const ExecutionOutcome& outcome) {
  Execution execution;
  {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(std::string(execution_id));
    if (it == open_.end()) {
      return absl::NotFoundError(
          StrCat("execution '", execution_id, "' is not open",
                 finished_.contains(std::string(execution_id)) ? " (it finished)" : ""));
    }
    Execution candidate = it->second.execution;
    candidate.termination = outcome.termination;
    candidate.final_reward = outcome.final_reward;
    candidate.partial_score = outcome.partial_score;
    // A reward it cannot train with is the caller's to fix: the execution stays open.
    RETURN_IF_ERROR(RewardOf(candidate).status());
    if (candidate.calls.empty()) {
      return absl::FailedPreconditionError(
          StrCat("execution '", execution_id, "' made no LLM call: nothing to train on"));
    }
    RETURN_IF_ERROR(candidate.Validate());
    execution = std::move(candidate);
    open_.erase(it);
    finished_.insert(execution.execution_id);
    ++counts_.finished;
  }
  RETURN_IF_ERROR(sink_(execution));
  return execution;
}

std::vector<std::string> ExecutionRegistry::OpenedBefore(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, entry] : open_) {
    if (entry.opened < deadline) ids.push_back(id);
  }
  return ids;
}

absl::Status ExecutionRegistry::Drop(std::string_view execution_id) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(std::string(execution_id));
  if (it == open_.end()) {
    return absl::NotFoundError(StrCat("execution '", execution_id, "' is not open"));
  }
  finished_.insert(it->first);
  open_.erase(it);
  ++counts_.dropped;
  return absl::OkStatus();
}

ExecutionCounts ExecutionRegistry::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace flywheel::gateway
