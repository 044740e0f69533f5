// A chat template (chat/chat_template.h): the Jinja source a Hugging Face model ships in its
// tokenizer_config.json, which flywheel parses and renders itself. The input is the template's
// source; one that parses is rendered over a short tool-calling conversation, with tools and
// with a generation prompt, as ChatTemplate::Render would for an actor.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/time/time.h"
#include "flywheel/chat/chat_template.h"

namespace {

const nlohmann::ordered_json& Messages() {
  static const nlohmann::ordered_json* messages =
      new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+3? <tool_response>"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n",
         "tool_calls": [{"type": "function",
                         "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "5", "reasoning_content": "easy"}])"));
  return *messages;
}

const nlohmann::ordered_json& Tools() {
  static const nlohmann::ordered_json* tools =
      new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
        {"type": "function", "function": {"name": "add", "description": "a + b",
         "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}])"));
  return *tools;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<flywheel::ChatTemplate> tmpl =
      flywheel::ChatTemplate::FromString(source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  if (!tmpl.ok()) return 0;
  flywheel::ChatRenderOptions options;
  options.add_generation_prompt = true;
  options.tools = Tools();
  options.variables["enable_thinking"] = false;
  options.now = [] { return absl::FromUnixSeconds(1700000000); };
  options.time_zone = absl::UTCTimeZone();
  (void)tmpl->Render(Messages(), options);
  return 0;
}
