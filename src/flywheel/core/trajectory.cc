#include "flywheel/core/trajectory.h"

#include <algorithm>
#include <cmath>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

constexpr std::string_view kRoleNames[] = {"main", "main-summary", "sub-agent",
                                           "sub-agent-summary"};
constexpr std::string_view kTerminationNames[] = {"done", "max-turns", "timeout", "env-error",
                                                  "cancelled"};

// Log-probs are log μ(a|s) ≤ 0; a little slack absorbs float rounding of log-softmax.
constexpr float kMaxLogprob = 1e-3f;

bool SameFloat(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

absl::Status FieldError(const Trajectory& t, std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("trajectory '", t.id, "': field ", field, ": ", what));
}

}  // namespace

std::string_view RoleName(Role role) { return kRoleNames[static_cast<int>(role)]; }

absl::StatusOr<Role> ParseRole(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (kRoleNames[i] == name) return static_cast<Role>(i);
  }
  return absl::InvalidArgumentError(StrCat(
      "unknown role '", name, "' (expected main, main-summary, sub-agent, sub-agent-summary)"));
}

std::string_view TerminationName(Termination termination) {
  return kTerminationNames[static_cast<int>(termination)];
}

absl::StatusOr<Termination> ParseTermination(std::string_view name) {
  for (int i = 0; i < 5; ++i) {
    if (kTerminationNames[i] == name) return static_cast<Termination>(i);
  }
  return absl::InvalidArgumentError(StrCat(
      "unknown termination '", name, "' (expected done, max-turns, timeout, env-error, cancelled)"));
}

void Trajectory::AppendPrompt(int32_t token) {
  tokens.push_back(token);
  trainable.push_back(0);
  logprobs.push_back(kNoLogprob);
  versions.push_back(kNoVersion);
}

void Trajectory::AppendGenerated(int32_t token, float logprob, int64_t version) {
  tokens.push_back(token);
  trainable.push_back(1);
  logprobs.push_back(logprob);
  versions.push_back(version);
}

int64_t Trajectory::NumTrainable() const {
  return std::count_if(trainable.begin(), trainable.end(), [](uint8_t t) { return t != 0; });
}

int64_t Trajectory::MinVersion() const {
  int64_t v = kNoVersion;
  for (size_t i = 0; i < versions.size() && i < trainable.size(); ++i) {
    if (trainable[i] && (v == kNoVersion || versions[i] < v)) v = versions[i];
  }
  return v;
}

int64_t Trajectory::MaxVersion() const {
  int64_t v = kNoVersion;
  for (size_t i = 0; i < versions.size() && i < trainable.size(); ++i) {
    if (trainable[i] && versions[i] > v) v = versions[i];
  }
  return v;
}

absl::Status Trajectory::Validate(int64_t vocab_size) const {
  if (id.empty()) return FieldError(*this, "id", "is empty");
  if (tokens.empty()) return FieldError(*this, "tokens", "trajectory is empty (no tokens)");
  const size_t n = tokens.size();
  auto length_error = [&](std::string_view field, size_t got) {
    return FieldError(*this, field,
                      fmt::format("has {} entries but tokens has {}", got, n));
  };
  if (trainable.size() != n) return length_error("trainable", trainable.size());
  if (logprobs.size() != n) return length_error("logprobs", logprobs.size());
  if (versions.size() != n) return length_error("versions", versions.size());

  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || (vocab_size > 0 && tokens[i] >= vocab_size)) {
      return FieldError(*this, StrCat("tokens[", i, "]"),
                        fmt::format("token id {} outside the vocabulary [0, {})", tokens[i],
                                        vocab_size));
    }
    const float lp = logprobs[i];
    if (trainable[i]) {
      if (std::isnan(lp)) {
        return FieldError(*this, StrCat("logprobs[", i, "]"),
                          "trainable (policy-generated) token has no behaviour log-prob");
      }
      if (versions[i] < 0) {
        return FieldError(*this, StrCat("versions[", i, "]"),
                          StrCat("trainable token has no policy version (", versions[i],
                                       ")"));
      }
    }
    if (!std::isnan(lp) && (!std::isfinite(lp) || lp > kMaxLogprob)) {
      return FieldError(*this, StrCat("logprobs[", i, "]"),
                        StrCat("log-prob ", lp, " is not a finite value <= 0"));
    }
  }

  if (turn_ends.size() != turn_rewards.size()) {
    return FieldError(*this, "turn_rewards",
                      fmt::format("has {} entries but turn_ends has {}", turn_rewards.size(),
                                      turn_ends.size()));
  }
  for (size_t i = 0; i < turn_ends.size(); ++i) {
    const int32_t prev = i == 0 ? 0 : turn_ends[i - 1];
    if (turn_ends[i] <= prev || turn_ends[i] > static_cast<int64_t>(n)) {
      return FieldError(*this, StrCat("turn_ends[", i, "]"),
                        fmt::format("{} is not increasing within ({}, {}]", turn_ends[i],
                                        prev, n));
    }
    if (!std::isfinite(turn_rewards[i])) {
      return FieldError(*this, StrCat("turn_rewards[", i, "]"), "is not finite");
    }
  }
  if (!call_roles.empty()) {
    if (call_roles.size() != turn_ends.size() || turn_ends.back() != static_cast<int64_t>(n)) {
      return FieldError(*this, "call_roles",
                        fmt::format("has {} entries: a recorded execution needs one per turn "
                                    "({}), and its turns must cover all {} tokens",
                                    call_roles.size(), turn_ends.size(), n));
    }
    for (size_t i = 0; i < call_roles.size(); ++i) {
      if (call_roles[i] < Role::kMain || call_roles[i] > Role::kSubAgentSummary) {
        return FieldError(*this, StrCat("call_roles[", i, "]"), "is not a role");
      }
    }
  }
  if (!std::isfinite(final_reward)) return FieldError(*this, "final_reward", "is not finite");
  if (partial_score && !std::isfinite(*partial_score)) {
    return FieldError(*this, "partial_score", "is not finite");
  }
  if (parent_id.empty() != (fork_position < 0)) {
    return FieldError(*this, "fork_position",
                      "parent_id and fork_position must be set together (a branch) or both "
                      "unset (a root path)");
  }
  if (finished_unix_ns != 0 && finished_unix_ns < created_unix_ns) {
    return FieldError(*this, "finished_unix_ns", "is earlier than created_unix_ns");
  }
  return absl::OkStatus();
}

std::string Trajectory::DebugString() const {
  return fmt::format(
      "Trajectory(id={}, execution={}, group={}, task={}, env={}, role={}, tokens={}, "
      "trainable={}, versions=[{},{}], reward={}, termination={})",
      id, execution_id, group_id, task_id, env_name, RoleName(role), size(), NumTrainable(),
      MinVersion(), MaxVersion(), final_reward, TerminationName(termination));
}

bool operator==(const Trajectory& a, const Trajectory& b) {
  auto same_floats = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), SameFloat);
  };
  const bool same_partial =
      a.partial_score.has_value() == b.partial_score.has_value() &&
      (!a.partial_score || SameFloat(*a.partial_score, *b.partial_score));
  return a.id == b.id && a.execution_id == b.execution_id && a.group_id == b.group_id &&
         a.task_id == b.task_id && a.env_name == b.env_name && a.role == b.role &&
         a.parent_id == b.parent_id && a.fork_position == b.fork_position &&
         a.tokens == b.tokens && a.trainable == b.trainable && same_floats(a.logprobs, b.logprobs) &&
         a.versions == b.versions && a.turn_ends == b.turn_ends &&
         same_floats(a.turn_rewards, b.turn_rewards) && SameFloat(a.final_reward, b.final_reward) &&
         same_partial && a.termination == b.termination && a.call_roles == b.call_roles &&
         a.actor_id == b.actor_id &&
         a.created_unix_ns == b.created_unix_ns && a.finished_unix_ns == b.finished_unix_ns;
}

}  // namespace flywheel
