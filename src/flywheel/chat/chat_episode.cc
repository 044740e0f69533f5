#include "flywheel/chat/chat_episode.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using nlohmann::ordered_json;

// A message's role, or "" when it is not an object with a string role (nlohmann's
// value("role", "") throws type_error for {"role": 1}, and a message may come from outside).
std::string Role(const ordered_json& message) {
  if (!message.is_object()) return "";
  const auto it = message.find("role");
  return it != message.end() && it->is_string() ? it->get<std::string>() : "";
}

// Stands in for an assistant's content to find where its message ends in a render. Plain ASCII
// without whitespace, so that trim/strip/lstrip in templates leave it as it is.
constexpr std::string_view kContentMarker = "[[flywheel.policy.content.7c1e]]";

absl::StatusOr<std::string> RenderWith(const ChatTemplate& t, const ordered_json& messages,
                                       ChatRenderOptions options, bool add_generation_prompt) {
  options.add_generation_prompt = add_generation_prompt;
  return t.Render(messages, options);
}

// Position just after `stop` following the marker in `text`.
absl::StatusOr<size_t> EndOfMarkedTurn(const std::string& text, std::string_view stop) {
  const size_t marker = text.find(kContentMarker);
  if (marker == std::string::npos || text.find(kContentMarker, marker + 1) != std::string::npos) {
    return absl::FailedPreconditionError(
        "the chat template does not render the assistant's content exactly once as given");
  }
  const size_t at = text.find(stop, marker + kContentMarker.size());
  if (at == std::string::npos) {
    return absl::FailedPreconditionError(
        StrCat("the chat template renders no '", stop, "' after the assistant's message"));
  }
  return at + stop.size();
}

ordered_json WithMarkedLastAssistant(ordered_json messages) {
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    if (Role(*it) == "assistant") {
      (*it)["content"] = std::string(kContentMarker);
      break;
    }
  }
  return messages;
}

}  // namespace

absl::StatusOr<PolicyTurnEnd> FindPolicyTurnEnd(const ChatTemplate& chat_template,
                                                const ChatRenderOptions& options) {
  const ordered_json user = {{"role", "user"}, {"content", "Hi"}};
  const ordered_json assistant = {{"role", "assistant"}, {"content", std::string(kContentMarker)}};
  const ordered_json next = {{"role", "user"}, {"content", "Again"}};
  ASSIGN_OR_RETURN(std::string at_end,
                   RenderWith(chat_template, ordered_json::array({user, assistant}), options,
                              /*add_generation_prompt=*/false));
  ASSIGN_OR_RETURN(std::string followed,
                   RenderWith(chat_template, ordered_json::array({user, assistant, next}), options,
                              /*add_generation_prompt=*/false));
  const size_t marker = at_end.find(kContentMarker);
  const size_t marker2 = followed.find(kContentMarker);
  if (marker == std::string::npos || marker2 == std::string::npos) {
    return absl::FailedPreconditionError(
        "the chat template does not render an assistant message's content as given");
  }
  const std::string after = at_end.substr(marker + kContentMarker.size());
  const std::string after2 = followed.substr(marker2 + kContentMarker.size());
  PolicyTurnEnd end;
  for (const std::string& token : chat_template.added_special_tokens()) {  // longest first
    if (!token.empty() && absl::StartsWith(after, token)) {
      end.stop = token;
      break;
    }
  }
  if (end.stop.empty() && !chat_template.eos_token().empty() &&
      absl::StartsWith(after, chat_template.eos_token())) {
    end.stop = chat_template.eos_token();
  }
  if (end.stop.empty()) {
    return absl::FailedPreconditionError(
        StrCat("cannot tell where the policy's turn ends: the template writes ",
               ordered_json(after.substr(0, 40)).dump(),
               " after an assistant message, which starts with none of the tokenizer's special "
               "tokens (added_tokens_decoder) nor its eos_token"));
  }
  if (!absl::StartsWith(after2, end.stop)) {
    return absl::FailedPreconditionError(StrCat("the template ends an assistant message with '",
                                                end.stop, "' only when it is the last message"));
  }
  const std::string_view rest(after.data() + end.stop.size(), after.size() - end.stop.size());
  const std::string_view rest2(after2.data() + end.stop.size(), after2.size() - end.stop.size());
  size_t common = 0;
  while (common < rest.size() && common < rest2.size() && rest[common] == rest2[common]) ++common;
  end.template_tail = std::string(rest.substr(0, common));
  return end;
}

absl::StatusOr<ChatEpisode> ChatEpisode::Start(const ChatTemplate* chat_template,
                                               ordered_json initial_messages,
                                               ChatRenderOptions options) {
  if (!initial_messages.is_array() || initial_messages.empty()) {
    return absl::InvalidArgumentError("an episode starts with a non-empty list of messages");
  }
  ChatEpisode episode;
  episode.chat_template_ = chat_template;
  episode.options_ = std::move(options);
  ASSIGN_OR_RETURN(episode.turn_end_, FindPolicyTurnEnd(*chat_template, episode.options_));
  episode.stop_strings_.push_back(episode.turn_end_.stop);
  const std::string eos = chat_template->eos_token();
  if (!eos.empty() && eos != episode.turn_end_.stop) episode.stop_strings_.push_back(eos);
  ASSIGN_OR_RETURN(std::string prompt,
                   RenderWith(*chat_template, initial_messages, episode.options_,
                              /*add_generation_prompt=*/true));
  episode.messages_ = std::move(initial_messages);
  episode.Append(std::move(prompt), /*is_policy=*/false);
  return episode;
}

void ChatEpisode::Append(std::string text, bool is_policy) {
  if (text.empty()) return;
  text_size_ += text.size();
  segments_.push_back(ChatSegment{std::move(text), is_policy});
}

std::string ChatEpisode::Text() const {
  std::string out;
  out.reserve(text_size_);
  for (const ChatSegment& s : segments_) out += s.text;
  return out;
}

absl::StatusOr<std::string> ChatEpisode::RenderedPolicyTurn(
    const ordered_json& assistant_message) const {
  ordered_json messages = messages_;
  messages.push_back(assistant_message);
  ASSIGN_OR_RETURN(std::string rendered, RenderWith(*chat_template_, messages, options_,
                                                    /*add_generation_prompt=*/false));
  const std::string text = Text();
  if (!absl::StartsWith(rendered, text)) {
    return absl::FailedPreconditionError(
        "the template's render of the conversation does not continue the episode's text (the "
        "template re-renders earlier turns differently)");
  }
  const size_t stop = rendered.rfind(turn_end_.stop);
  if (stop == std::string::npos || stop < text.size()) {
    return absl::FailedPreconditionError(
        StrCat("the template renders no '", turn_end_.stop, "' after the assistant's message"));
  }
  return rendered.substr(text.size(), stop + turn_end_.stop.size() - text.size());
}

absl::Status ChatEpisode::AddPolicyTurn(std::string generated_text,
                                        ordered_json assistant_message) {
  if (!awaiting_policy_) {
    return absl::FailedPreconditionError(
        "two policy turns in a row: add the environment's messages first");
  }
  if (Role(assistant_message) != "assistant") {
    return absl::InvalidArgumentError(
        StrCat("the policy's message must be {\"role\": \"assistant\", …}, got ",
               assistant_message.dump()));
  }
  last_turn_stopped_ = false;
  for (const std::string& stop : stop_strings_) {
    if (absl::EndsWith(generated_text, stop)) last_turn_stopped_ = true;
  }
  messages_.push_back(std::move(assistant_message));
  Append(std::move(generated_text), /*is_policy=*/true);
  awaiting_policy_ = false;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ChatEpisode::AddEnvironmentMessages(const ordered_json& messages) {
  if (awaiting_policy_) {
    return absl::FailedPreconditionError(
        "the environment answers a policy turn: add the policy's turn first");
  }
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError("environment messages must be a non-empty list");
  }
  ordered_json all = messages_;
  for (const auto& m : messages) all.push_back(m);
  ASSIGN_OR_RETURN(std::string marked, RenderWith(*chat_template_, WithMarkedLastAssistant(all),
                                                  options_, /*add_generation_prompt=*/true));
  ASSIGN_OR_RETURN(size_t boundary, EndOfMarkedTurn(marked, turn_end_.stop));
  std::string delta = marked.substr(boundary);
  ASSIGN_OR_RETURN(std::string rendered,
                   RenderWith(*chat_template_, all, options_, /*add_generation_prompt=*/true));
  if (!absl::EndsWith(rendered, delta)) {
    return absl::FailedPreconditionError(
        "the chat template writes the environment's turn differently depending on the "
        "assistant's content, so the text after the policy's stop string is not defined");
  }
  if (!last_turn_stopped_) delta = turn_end_.stop + delta;
  // Prefix stability: does the template's render of the history equal the episode's text?
  const std::string history(rendered.data(), rendered.size() - delta.size() +
                                                 (last_turn_stopped_ ? 0 : turn_end_.stop.size()));
  const std::string text = Text() + (last_turn_stopped_ ? "" : turn_end_.stop);
  if (history != text) ++history_rerendered_;
  messages_ = std::move(all);
  Append(delta, /*is_policy=*/false);
  awaiting_policy_ = true;
  return delta;
}

}  // namespace flywheel
