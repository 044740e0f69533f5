#include "flywheel/gateway/context_match.h"

#include <algorithm>
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

MatchedContext MatchContext(std::vector<int64_t> rendered, const std::vector<LlmCall>& earlier,
                            const Tokenizer& tokenizer, size_t max_calls) {
  if (earlier.empty()) return {std::move(rendered), ContextMatch::kFirst};
  const size_t tried = std::min(max_calls, earlier.size());
  for (size_t i = 0; i < tried; ++i) {
    const std::vector<int64_t> sequence = Sequence(earlier[earlier.size() - 1 - i]);
    if (sequence.size() <= rendered.size() &&
        std::equal(sequence.begin(), sequence.end(), rendered.begin())) {
      return {std::move(rendered), ContextMatch::kTokens};
    }
  }
  const absl::StatusOr<std::string> text = tokenizer.Decode(rendered);
  if (text.ok()) {
    for (size_t i = 0; i < tried; ++i) {
      std::vector<int64_t> sequence = Sequence(earlier[earlier.size() - 1 - i]);
      const absl::StatusOr<std::string> prefix = tokenizer.Decode(sequence);
      if (!prefix.ok() || prefix->empty() || !text->starts_with(*prefix)) continue;
      const absl::StatusOr<std::vector<int64_t>> rest =
          tokenizer.Encode(std::string_view(*text).substr(prefix->size()));
      if (!rest.ok()) continue;
      sequence.insert(sequence.end(), rest->begin(), rest->end());
      return {std::move(sequence), ContextMatch::kText};
    }
  }
  return {std::move(rendered), ContextMatch::kRerendered};
}

}  // namespace flywheel::gateway
