// What the gateway reads from outside (gateway/chat_messages.h): an OpenAI chat request body from
// any HTTP client (its messages and tools converted and rendered with the real Qwen3 chat
// template, as a request is), and the model's text parsed back into an assistant message in
// every tool-call format. The input is both: the body, and the model's output.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "flywheel/chat/chat_template.h"
#include "flywheel/gateway/chat_messages.h"
#include "real_files.h"

namespace {

using Json = nlohmann::ordered_json;

const flywheel::ChatTemplate& Qwen3() {
  static const flywheel::ChatTemplate* t = [] {
    auto loaded = flywheel::LoadChatTemplate(
        flywheel::fuzz::SourcePath("third_party/tokenizers/qwen3/tokenizer_config.json"));
    flywheel::fuzz::ExitUnlessOk(loaded.status(), "the Qwen3 chat template");
    return new flywheel::ChatTemplate(*std::move(loaded));
  }();
  return *t;
}

void Request(const Json& body) {
  if (!body.is_object()) return;
  flywheel::ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.now = [] { return absl::FromUnixSeconds(0); };
  if (body.contains("tools")) {
    absl::StatusOr<Json> tools = flywheel::gateway::ToTemplateTools(body["tools"]);
    if (!tools.ok()) return;
    options.tools = *std::move(tools);
  }
  if (!body.contains("messages")) return;
  absl::StatusOr<Json> messages = flywheel::gateway::ToTemplateMessages(body["messages"]);
  if (!messages.ok()) return;
  Qwen3().Render(*messages, options).IgnoreError();
}

void Output(std::string_view text) {
  for (auto format : {flywheel::gateway::ToolCallFormat::kNone,
                      flywheel::gateway::ToolCallFormat::kHermes,
                      flywheel::gateway::ToolCallFormat::kLlama3Json}) {
    const flywheel::gateway::AssistantOutput out =
        flywheel::gateway::ParseAssistantOutput(text, format, "call");
    const Json message = flywheel::gateway::ToOpenAIMessage(out);
    // The gateway writes it with invalid UTF-8 replaced; that must never throw.
    message.dump(-1, ' ', false, Json::error_handler_t::replace);
    for (const Json& call : out.tool_calls) {
      // Arguments are JSON text of an object, as OpenAI sends them.
      const Json arguments = Json::parse(call["function"]["arguments"].get<std::string>(),
                                         nullptr, /*allow_exceptions=*/false);
      if (!arguments.is_object()) std::abort();
    }
    flywheel::gateway::FinishReason(out, "stop");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Request(Json::parse(input, nullptr, /*allow_exceptions=*/false));
  Output(input);
  return 0;
}
