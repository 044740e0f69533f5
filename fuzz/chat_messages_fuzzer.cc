// The real Qwen3 chat template (third_party/tokenizers/qwen3/tokenizer_config.json) rendered over
// messages built from the input, as an actor renders an episode whose content came from a policy
// or an environment: any roles, contents (any bytes), reasoning, tool calls with any names and
// arguments, tools or none, with or without a generation prompt and thinking.
//
// Input (fuzz_input.h): a flags byte (bit 0 generation prompt, 1 tools, 2 enable_thinking,
// 3 enable_thinking given), then messages: a kind byte, [u16][content], and per kind bits
// [u16][reasoning_content] and tool calls ([u16][name], [u16][arguments: JSON text or a string]).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "flywheel/chat/chat_template.h"
#include "fuzz_input.h"
#include "real_files.h"

namespace {

const flywheel::ChatTemplate* qwen3 = nullptr;

// Contents are arbitrary bytes; JSON strings hold UTF-8, so invalid bytes become U+FFFD as a
// Python str from a client would hold them.
std::string Utf8(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      continue;
    }
    const int n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    bool ok = n > 0 && i + n <= bytes.size();
    for (int k = 1; ok && k < n; ++k)
      ok = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
    if (ok && n == 3) {
      const unsigned char c1 = static_cast<unsigned char>(bytes[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && n == 4) {
      const unsigned char c1 = static_cast<unsigned char>(bytes[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (!ok) {
      out += "\xEF\xBF\xBD";
      continue;
    }
    out.append(bytes.substr(i, n));
    i += n - 1;
  }
  return out;
}

nlohmann::ordered_json Arguments(std::string_view text) {
  nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(text, nullptr, false);
  if (parsed.is_discarded()) return Utf8(text);
  return parsed;
}

nlohmann::ordered_json Message(flywheel::fuzz::FuzzInput& in) {
  static const char* const kRoles[] = {"system", "user", "assistant", "tool", "developer"};
  const uint8_t kind = in.Byte();
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  m["role"] = kRoles[kind % 5];
  m["content"] = Utf8(in.Bytes());
  if (kind & 0x08) m["reasoning_content"] = Utf8(in.Bytes());
  if (kind & 0x10) m["content"] = nullptr;
  if (kind & 0x20) {
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (int n = 1 + (kind >> 6); n > 0; --n) {
      nlohmann::ordered_json function = {{"name", Utf8(in.Bytes())},
                                         {"arguments", Arguments(in.Bytes())}};
      calls.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    m["tool_calls"] = std::move(calls);
  }
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string path =
      flywheel::fuzz::SourcePath("third_party/tokenizers/qwen3/tokenizer_config.json");
  absl::StatusOr<flywheel::ChatTemplate> tmpl = flywheel::LoadChatTemplate(path);
  flywheel::fuzz::ExitUnlessOk(tmpl.status(), path);
  qwen3 = new flywheel::ChatTemplate(*std::move(tmpl));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flywheel::fuzz::FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  flywheel::ChatRenderOptions options;
  options.add_generation_prompt = flags & 1;
  if (flags & 2) {
    options.tools = nlohmann::ordered_json::array(
        {{{"type", "function"},
          {"function", {{"name", "add"}, {"parameters", {{"type", "object"}}}}}}});
  }
  if (flags & 8) options.variables["enable_thinking"] = (flags & 4) != 0;
  options.now = [] { return absl::FromUnixSeconds(1700000000); };
  options.time_zone = absl::UTCTimeZone();
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  while (!in.empty()) messages.push_back(Message(in));
  (void)qwen3->Render(messages, options);
  return 0;
}
