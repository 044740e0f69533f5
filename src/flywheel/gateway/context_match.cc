#include "flywheel/gateway/context_match.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace flywheel::gateway {
namespace {

std::vector<int64_t> Sequence(const LlmCall& call) {
  std::vector<int64_t> tokens(call.context.begin(), call.context.end());
  tokens.insert(tokens.end(), call.generated.begin(), call.generated.end());
  return tokens;
}

}  // namespace

MatchedContext MatchContext(std::vector<int64_t> rendered, std::string_view rendered_text,
                            const std::vector<LlmCall>& earlier, const Tokenizer& tokenizer,
                            size_t max_calls) {
  if (earlier.empty()) return {std::move(rendered), ContextMatch::kFirst};
  std::optional<std::string> text;  // decoded only when a call needs it
  const size_t tried = std::min(max_calls, earlier.size());
  // Newest first: the call the agent answers is the one whose tokens the prompt must continue
  // (an older call is a prefix too, but continuing it would drop the newest call's tokens).
  for (size_t i = 0; i < tried; ++i) {
    std::vector<int64_t> sequence = Sequence(earlier[earlier.size() - 1 - i]);
    if (sequence.size() <= rendered.size() &&
        std::equal(sequence.begin(), sequence.end(), rendered.begin())) {
      return {std::move(rendered), ContextMatch::kTokens};
    }
    if (!text) {
      // The text as rendered, before the tokenizer normalised it (Qwen3's NFC would change
      // decomposed characters the policy generated, and no prefix would match).
      if (!rendered_text.empty()) {
        text = std::string(rendered_text);
      } else {
        absl::StatusOr<std::string> decoded = tokenizer.Decode(rendered);
        if (!decoded.ok()) break;
        text = *std::move(decoded);
      }
    }
    const absl::StatusOr<std::string> prefix = tokenizer.Decode(sequence);
    if (!prefix.ok() || prefix->empty() || !text->starts_with(*prefix)) continue;
    const absl::StatusOr<std::vector<int64_t>> rest =
        tokenizer.Encode(std::string_view(*text).substr(prefix->size()));
    if (!rest.ok()) continue;
    sequence.insert(sequence.end(), rest->begin(), rest->end());
    return {std::move(sequence), ContextMatch::kText};
  }
  return {std::move(rendered), ContextMatch::kRerendered};
}

}  // namespace flywheel::gateway
