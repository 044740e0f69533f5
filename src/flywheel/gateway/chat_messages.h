// The gateway's translation between OpenAI's chat-completions API and the model's own chat
// template: requests in, the model's text out. Pure functions; no torch, no HTTP.
//
//   request.messages ──ToTemplateMessages──▶ ChatTemplate::Render ──▶ prompt ──▶ engine
//   request.tools ─────ToTemplateTools─────▶        (tools)
//   engine text ──ParseAssistantOutput(format)──▶ AssistantOutput ──ToOpenAIMessage──▶ response
//
// The format the output is parsed with is the one the template writes tool calls in, found once
// per template by DetectToolCallFormat: a model calls tools the way its training conversations,
// rendered by that template, showed it.
//
// Inputs are ordered_json because templates print JSON with `tojson` in the order the client
// sent it (Python dicts keep insertion order); nlohmann::json would sort the keys of every tool
// schema and argument object, and the prompt would differ from what transformers renders.
#ifndef FLYWHEEL_GATEWAY_CHAT_MESSAGES_H_
#define FLYWHEEL_GATEWAY_CHAT_MESSAGES_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace flywheel::gateway {

// How a chat template writes an assistant's tool calls, and so how the model writes them.
enum class ToolCallFormat {
  kNone,  // the template writes no tool calls we can read back: requests with tools are refused
  // `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks, any number, after or among
  // the content (Hermes, Qwen2.5, Qwen3).
  kHermes,
  // The whole assistant turn is one `{"name": …, "parameters": {…}}` object ("arguments" also
  // read), optionally after `<|python_tag|>` (Llama 3.1 and later).
  kLlama3Json,
};

// "none", "hermes", "llama3_json".
std::string_view ToolCallFormatName(ToolCallFormat format);

// Renders a probe conversation (a user message, then an assistant message calling a made-up
// function with made-up arguments, with that function in `tools`) and reads how the template
// wrote the call. kNone when it wrote it in neither format (a template without tool support
// drops it); an error when the template fails to render the probe.
absl::StatusOr<ToolCallFormat> DetectToolCallFormat(const ChatTemplate& chat_template);

// OpenAI `messages` → the messages Hugging Face templates read. Roles system, developer (→
// system), user, assistant, tool; content a string, an array of text parts (joined with "\n", as
// vLLM does), or null (→ "", for an assistant message with tool_calls); tool_calls[].function
// .arguments parsed from OpenAI's JSON string into the object templates print; a tool message
// without `name` takes the function name of the call its tool_call_id answers. InvalidArgument
// errors name the message and field ("messages[2].role must be …").
absl::StatusOr<nlohmann::ordered_json> ToTemplateMessages(
    const nlohmann::ordered_json& openai_messages);

// OpenAI `tools`: an array of {"type": "function", "function": {"name", "description"?,
// "parameters"?}}. InvalidArgument errors name the tool ("tools[1].function.name …").
absl::Status ValidateTools(const nlohmann::ordered_json& tools);

// What the template's `tools` variable gets: Hugging Face templates read the OpenAI shape
// itself (transformers turns a Python function into the same {"type": "function", …} dict), so
// the validated list unchanged, or null for an empty list (templates test `if tools`).
absl::StatusOr<nlohmann::ordered_json> ToTemplateTools(const nlohmann::ordered_json& tools);

// The model's output as an OpenAI assistant message.
struct AssistantOutput {
  std::string content;
  std::string reasoning_content;  // the leading <think>…</think> block; "" when none
  // [{"id", "type": "function", "function": {"name", "arguments": "<compact JSON>"}}, …]
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();
};

// Splits the model's text: a leading <think>…</think> block is the reasoning (newlines around it
// stripped, as Qwen's template writes them; an unclosed one, cut off by the length limit, is all
// reasoning); tool calls in `format` become tool_calls with ids "<call_id_prefix>_<i>"; the rest
// is content. A call that does not parse as {"name": string, "arguments"|"parameters": object}
// stays in the content: the model wrote malformed text, which the client sees as it is. Never
// fails.
AssistantOutput ParseAssistantOutput(std::string_view text, ToolCallFormat format,
                                     std::string_view call_id_prefix);

// The response's `message`: {"role": "assistant", "content", "reasoning_content"?,
// "tool_calls"?}; content is null when empty and there are tool calls, as OpenAI sends it.
nlohmann::ordered_json ToOpenAIMessage(const AssistantOutput& output);

// The response's finish_reason: "tool_calls" when the model called tools, else the engine's
// ("stop", "length"), as vLLM reports it.
std::string FinishReason(const AssistantOutput& output, std::string_view engine_reason);

}  // namespace flywheel::gateway

#endif  // FLYWHEEL_GATEWAY_CHAT_MESSAGES_H_
