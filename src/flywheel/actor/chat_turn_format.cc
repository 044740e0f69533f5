#include "flywheel/actor/chat_turn_format.h"

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using nlohmann::ordered_json;

// Stands for the reply in the probes. Letters only: a template may trim content, and Python
// counts control characters such as \x1f as space.
constexpr std::string_view kMarker = "FlywheelReplyMarker7f3a";
// Checks that a template writes a reply unchanged (leading and trailing space, markup).
constexpr std::string_view kProbeReply = "  a reply <b>{{ x }}</b> & more\n ";
constexpr std::string_view kProbeAnswer = "probe answer";

ordered_json UserMessage(std::string_view content) {
  return ordered_json{{"role", "user"}, {"content", std::string(content)}};
}

}  // namespace

absl::StatusOr<std::string> ChatTurnFormat::Render(Place place,
                                                   std::string_view observation) const {
  ASSIGN_OR_RETURN(
      ChatEpisode episode,
      ChatEpisode::Start(
          chat_template_,
          ordered_json::array({UserMessage(place == kFirst ? observation : "probe")}), options_));
  if (place == kFirst) return episode.Text();
  const std::string stop = place == kAfterStop ? episode.turn_end().stop : "";
  RETURN_IF_ERROR(episode.AddPolicyTurn(
      StrCat(kProbeAnswer, stop),
      ordered_json{{"role", "assistant"}, {"content", std::string(kProbeAnswer)}}));
  return episode.AddEnvironmentMessages(ordered_json::array({UserMessage(observation)}));
}

absl::StatusOr<std::unique_ptr<ChatTurnFormat>> ChatTurnFormat::Create(
    const ChatTemplate* chat_template, const Tokenizer* tokenizer, ChatRenderOptions options) {
  std::unique_ptr<ChatTurnFormat> format(
      new ChatTurnFormat(chat_template, tokenizer, std::move(options)));
  ASSIGN_OR_RETURN(ChatEpisode probe,
                   ChatEpisode::Start(chat_template, ordered_json::array({UserMessage("probe")}),
                                      format->options_));
  for (const std::string& stop : probe.stop_strings()) {
    ASSIGN_OR_RETURN(const std::vector<int64_t> ids, tokenizer->Encode(stop));
    if (ids.size() != 1) {
      return absl::InvalidArgumentError(StrCat("chat template: the policy's turn ends with \"",
                                               stop, "\", which the tokenizer ", "encodes as ",
                                               ids.size(), " tokens, not one special token"));
    }
    format->stop_tokens_.push_back(ids[0]);
  }
  for (Place place : {kFirst, kAfterStop, kAfterCut}) {
    ASSIGN_OR_RETURN(const std::string text, format->Render(place, kMarker));
    const size_t at = text.find(kMarker);
    if (at == std::string::npos || text.find(kMarker, at + 1) != std::string::npos) {
      continue;  // not placed as it is: every reply is rendered
    }
    Around& around = format->around_[place];
    around.before = text.substr(0, at);
    around.after = text.substr(at + kMarker.size());
    ASSIGN_OR_RETURN(const std::string probe_text, format->Render(place, kProbeReply));
    around.verbatim = probe_text == StrCat(around.before, kProbeReply, around.after);
  }
  return format;
}

absl::StatusOr<std::string> ChatTurnFormat::EnvironmentText(bool first, bool stopped,
                                                            std::string_view observation) const {
  const Place place = first ? kFirst : stopped ? kAfterStop : kAfterCut;
  const Around& around = around_[place];
  if (around.verbatim) return StrCat(around.before, observation, around.after);
  return Render(place, observation);
}

absl::StatusOr<std::vector<int64_t>> ChatTurnFormat::EnvironmentTurn(
    const Trajectory& t, std::string_view observation) const {
  const bool first = t.tokens.empty();
  const bool stopped = !first && (!t.trainable.back() || IsStop(t.tokens.back()));
  ASSIGN_OR_RETURN(const std::string text, EnvironmentText(first, stopped, observation));
  return tokenizer_->Encode(text);
}

}  // namespace flywheel
