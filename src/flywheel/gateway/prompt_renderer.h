// How the gateway turns an OpenAI request into the policy's prompt tokens, and the policy's
// output back into an assistant message, with the job's own text format:
//
//   a model directory (model.path)   its chat template, tools included (chat_messages.h); tool
//                                    calls parsed in the format the template writes them
//   flywheel's own models            the job's turn format (<|bos|> task <|eot|> reply <|eot|>
//                                    …): system and user/tool messages are the environment's
//                                    turns, assistant messages the policy's; no tools
//
// Thread-safe (const); borrows the tokenizer, template and turn format of the job's PolicyText.
#ifndef FLYWHEEL_GATEWAY_PROMPT_RENDERER_H_
#define FLYWHEEL_GATEWAY_PROMPT_RENDERER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/actor/turn_format.h"
#include "flywheel/chat/chat_template.h"
#include "flywheel/gateway/chat_messages.h"
#include "flywheel/model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace flywheel::gateway {

// A prompt's tokens and, where a template rendered it, the text they encode (before the
// tokenizer normalised it; empty for the turn format).
struct RenderedPrompt {
  std::string text;
  std::vector<int64_t> tokens;
};

class PromptRenderer {
 public:
  // `chat_template` null: the turn format renders (no tools).
  static absl::StatusOr<std::unique_ptr<PromptRenderer>> Create(const Tokenizer* tokenizer,
                                                                const ChatTemplate* chat_template,
                                                                const TurnFormat* turn_format);

  // The prompt of a chat request: `messages` (OpenAI's shape), `tools` (null or OpenAI's list),
  // `template_kwargs` (extra template variables, e.g. enable_thinking; an object), then the
  // generation prompt. InvalidArgument names the message or field that cannot be rendered.
  absl::StatusOr<RenderedPrompt> Chat(const nlohmann::ordered_json& messages,
                                      const nlohmann::ordered_json& tools,
                                      const nlohmann::ordered_json& template_kwargs) const;
  // The prompt of a text completion: the text as it is.
  absl::StatusOr<RenderedPrompt> Text(std::string_view prompt) const;
  // Text of generated tokens, a stop token at the end and padding ids (past the tokenizer's
  // vocabulary) left out.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& generated) const;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::vector<int64_t>& stop_tokens() const { return turn_format_->stop_tokens(); }
  ToolCallFormat tool_call_format() const { return tool_call_format_; }
  // "chat template" or "turn format", for /v1/models and logs.
  std::string_view prompt_format() const {
    return chat_template_ ? "chat template" : "turn format";
  }

 private:
  PromptRenderer(const Tokenizer* tokenizer, const ChatTemplate* chat_template,
                 const TurnFormat* turn_format, ToolCallFormat format)
      : tokenizer_(tokenizer),
        chat_template_(chat_template),
        turn_format_(turn_format),
        tool_call_format_(format) {}
  absl::StatusOr<RenderedPrompt> ChatWithTemplate(const nlohmann::ordered_json& messages,
                                                  const nlohmann::ordered_json& tools,
                                                  const nlohmann::ordered_json& kwargs) const;
  absl::StatusOr<RenderedPrompt> ChatWithTurnFormat(const nlohmann::ordered_json& messages) const;

  const Tokenizer* tokenizer_;
  const ChatTemplate* chat_template_;  // null: turn format
  const TurnFormat* turn_format_;
  const ToolCallFormat tool_call_format_;
};

}  // namespace flywheel::gateway

#endif  // FLYWHEEL_GATEWAY_PROMPT_RENDERER_H_
