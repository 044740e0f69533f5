#include "flywheel/gateway/prompt_renderer.h"

#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory.h"

namespace flywheel::gateway {
namespace {

bool HasTools(const nlohmann::ordered_json& tools) { return tools.is_array() && !tools.empty(); }

}  // namespace

absl::StatusOr<std::unique_ptr<PromptRenderer>> PromptRenderer::Create(
    const Tokenizer* tokenizer, const ChatTemplate* chat_template, const TurnFormat* turn_format) {
  if (tokenizer == nullptr || turn_format == nullptr) {
    return absl::InvalidArgumentError("gateway: a tokenizer and a turn format are needed");
  }
  ToolCallFormat format = ToolCallFormat::kNone;
  if (chat_template != nullptr) {
    ASSIGN_OR_RETURN(format, DetectToolCallFormat(*chat_template));
  }
  return std::unique_ptr<PromptRenderer>(
      new PromptRenderer(tokenizer, chat_template, turn_format, format));
}

absl::StatusOr<RenderedPrompt> PromptRenderer::Chat(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    const nlohmann::ordered_json& template_kwargs) const {
  if (!tools.is_null()) RETURN_IF_ERROR(ValidateTools(tools));
  if (!template_kwargs.is_null() && !template_kwargs.is_object()) {
    return absl::InvalidArgumentError("chat_template_kwargs must be an object");
  }
  if (chat_template_ != nullptr) return ChatWithTemplate(messages, tools, template_kwargs);
  if (HasTools(tools)) {
    return absl::InvalidArgumentError(
        "tools: this job's model has no chat template (flywheel's own turn format), so it has "
        "no tool-call format; serve a model directory (model.path) whose template has tools");
  }
  return ChatWithTurnFormat(messages);
}

absl::StatusOr<RenderedPrompt> PromptRenderer::ChatWithTemplate(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
    const nlohmann::ordered_json& kwargs) const {
  ASSIGN_OR_RETURN(const nlohmann::ordered_json rendered_messages, ToTemplateMessages(messages));
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  if (HasTools(tools)) {
    if (tool_call_format_ == ToolCallFormat::kNone) {
      return absl::InvalidArgumentError(
          "tools: this model's chat template writes tool calls in a format the gateway cannot "
          "parse back (it knows <tool_call> JSON blocks and Llama 3 JSON calls)");
    }
    ASSIGN_OR_RETURN(options.tools, ToTemplateTools(tools));
  }
  if (kwargs.is_object()) {
    for (const auto& [key, value] : kwargs.items()) options.variables[key] = value;
  }
  RenderedPrompt prompt;
  ASSIGN_OR_RETURN(prompt.text, chat_template_->Render(rendered_messages, options));
  ASSIGN_OR_RETURN(prompt.tokens, tokenizer_->Encode(prompt.text));
  return prompt;
}

// System, user and tool messages are the environment's turns, assistant messages the policy's
// (each closed by the format's end of turn, as the policy would have generated it).
absl::StatusOr<RenderedPrompt> PromptRenderer::ChatWithTurnFormat(
    const nlohmann::ordered_json& messages) const {
  ASSIGN_OR_RETURN(const nlohmann::ordered_json rendered_messages, ToTemplateMessages(messages));
  Trajectory t;
  for (size_t i = 0; i < rendered_messages.size(); ++i) {
    const nlohmann::ordered_json& m = rendered_messages[i];
    const std::string content = m.value("content", nlohmann::ordered_json("")).is_string()
                                    ? m["content"].get<std::string>()
                                    : std::string();
    const bool assistant = m.value("role", "") == "assistant";
    absl::StatusOr<std::vector<int64_t>> tokens =
        assistant ? tokenizer_->Encode(content) : turn_format_->EnvironmentTurn(t, content);
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(
          StrCat("messages[", i, "].content: ", tokens.status().message()));
    }
    if (assistant) tokens->push_back(turn_format_->stop_tokens().front());
    for (int64_t token : *tokens) t.AppendPrompt(static_cast<int32_t>(token));
  }
  return RenderedPrompt{"", std::vector<int64_t>(t.tokens.begin(), t.tokens.end())};
}

absl::StatusOr<RenderedPrompt> PromptRenderer::Text(std::string_view prompt) const {
  ASSIGN_OR_RETURN(std::vector<int64_t> tokens, tokenizer_->Encode(prompt));
  if (tokens.empty()) return absl::InvalidArgumentError("prompt is empty");
  return RenderedPrompt{std::string(prompt), std::move(tokens)};
}

absl::StatusOr<std::string> PromptRenderer::Decode(const std::vector<int64_t>& generated) const {
  std::vector<int64_t> ids = generated;
  if (!ids.empty() && turn_format_->IsStop(ids.back())) ids.pop_back();
  // Ids past the tokenizer's vocabulary are padding rows of the model's embedding table (Qwen3:
  // 151,936 rows for 151,669 ids): no text, as in HF's decode and the actor's.
  std::erase_if(ids, [&](int64_t id) { return id >= tokenizer_->vocab_size(); });
  return tokenizer_->Decode(ids);
}

}  // namespace flywheel::gateway
