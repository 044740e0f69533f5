#include "flywheel/runtime/sft_conversations.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// One line's messages as (observation, action) exchanges, or what is wrong with them.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Exchanges(
    const nlohmann::json& line) {
  if (!line.is_object() || !line.contains("messages") || !line["messages"].is_array()) {
    return absl::InvalidArgumentError(
        "expected an object with a \"messages\" array: {\"messages\": [{\"role\": \"user\", "
        "\"content\": ...}, {\"role\": \"assistant\", \"content\": ...}, ...]}");
  }
  std::vector<std::pair<std::string, std::string>> exchanges;
  bool environment_pending = false;
  const nlohmann::json& messages = line["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return absl::InvalidArgumentError(
          StrCat("message ", i + 1, ": expected {\"role\": string, \"content\": string}"));
    }
    const std::string role = m["role"];
    std::string content = m["content"];
    if (role == "user" || role == "tool") {
      if (environment_pending) {
        return absl::InvalidArgumentError(
            StrCat("message ", i + 1,
                   ": two environment turns (user or tool) in a row; each "
                   "must be answered by an assistant turn"));
      }
      exchanges.emplace_back(std::move(content), std::string());
      environment_pending = true;
    } else if (role == "assistant") {
      if (!environment_pending) {
        return absl::InvalidArgumentError(
            StrCat("message ", i + 1, ": an assistant turn must follow a user or tool turn"));
      }
      exchanges.back().second = std::move(content);
      environment_pending = false;
    } else {
      return absl::InvalidArgumentError(StrCat(
          "message ", i + 1, ": role \"", role,
          "\" (expected user, tool or assistant; the job's turn format decides what opens an "
          "episode, so a system prompt goes into the first user turn)"));
    }
  }
  if (exchanges.empty()) return absl::InvalidArgumentError("no messages");
  if (environment_pending) {
    return absl::InvalidArgumentError(
        "the last message must be the assistant's (a turn nobody answers trains nothing)");
  }
  return exchanges;
}

}  // namespace

absl::Status AppendExchange(const JobConfig& config, const PolicyText& text,
                            std::string_view observation, std::string_view action, Trajectory& t) {
  const TurnFormat& format = *text.turn_format;
  ASSIGN_OR_RETURN(const std::vector<int64_t> prompt, format.EnvironmentTurn(t, observation));
  for (int64_t token : prompt) t.AppendPrompt(static_cast<int32_t>(token));
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, text.tokenizer->Encode(action));
  if (static_cast<int64_t>(ids.size()) > config.actor.max_new_tokens) {
    return absl::FailedPreconditionError(
        StrCat("the action \"", action, "\" takes ", ids.size(),
               " tokens, more than actor.max_new_tokens = ", config.actor.max_new_tokens,
               ": the policy could never produce it"));
  }
  // As the engine ends a turn: at its stop token, or at max_new_tokens without one.
  if (static_cast<int64_t>(ids.size()) < config.actor.max_new_tokens) {
    ids.push_back(format.stop_tokens().front());
  }
  for (int64_t id : ids) t.AppendGenerated(static_cast<int32_t>(id), 0.0f, 0);
  t.turn_ends.push_back(static_cast<int32_t>(t.size()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Trajectory>> ReadSftConversations(const std::string& path,
                                                             const JobConfig& config,
                                                             const PolicyText& text,
                                                             int64_t max_seq_len) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(StrCat("sft.path = \"", path, "\": cannot open the file"));
  }
  std::vector<Trajectory> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto fail = [&](const absl::Status& s) {
      return absl::Status(
          s.code(), StrCat("sft.path = \"", path, "\" line ", number, ": ", ToStd(s.message())));
    };
    const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return fail(absl::InvalidArgumentError("not JSON (one conversation per line)"));
    }
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> exchanges = Exchanges(parsed);
    if (!exchanges.ok()) return fail(exchanges.status());
    Trajectory t;
    t.id = StrCat("sft-", number);
    t.env_name = "sft";
    for (const auto& [observation, action] : *exchanges) {
      const absl::Status appended = AppendExchange(config, text, observation, action, t);
      if (!appended.ok()) return fail(appended);
      t.turn_rewards.push_back(0);  // no environment scored it
    }
    if (static_cast<int64_t>(t.size()) > max_seq_len) {
      return fail(absl::InvalidArgumentError(StrCat("the conversation takes ", t.size(),
                                                    " tokens, more than the model's max_seq_len ",
                                                    max_seq_len)));
    }
    out.push_back(std::move(t));
  }
  if (in.bad()) return absl::DataLossError(StrCat("sft.path = \"", path, "\": read error"));
  if (out.empty()) {
    return absl::InvalidArgumentError(StrCat("sft.path = \"", path, "\": no conversations"));
  }
  return out;
}

}  // namespace flywheel
