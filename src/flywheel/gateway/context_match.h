// An agent sends its whole conversation with every call, so a call's prompt repeats text the
// policy generated in earlier calls of the execution. Rendered and tokenised afresh, that text
// can come out as other tokens than the ones the policy sampled (a BPE merge across the turn
// boundary, a template that re-renders history differently), and the execution's calls would
// then share no prefix in the trajectory tree, and the next call would condition on tokens the
// policy never produced. So where an earlier call's context and generated tokens are the
// prompt's prefix as text, the prompt continues from exactly those tokens:
//
//   earlier call:  context ▸ generated              (the engine's tokens)
//   new prompt:    Encode(Render(messages))          text = earlier text + new turns
//   matched:       context ▸ generated ▸ Encode(the new turns' text)
//
// Where no earlier call's text is a prefix (Qwen3 drops earlier turns' reasoning when it
// re-renders history), the rendered prompt stays as it is and the call counts as re-rendered.
#ifndef FLYWHEEL_GATEWAY_CONTEXT_MATCH_H_
#define FLYWHEEL_GATEWAY_CONTEXT_MATCH_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "flywheel/model/tokenizer.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel::gateway {

enum class ContextMatch {
  kFirst,       // the execution's first call: nothing to match
  kTokens,      // an earlier call's tokens are already the prompt's prefix
  kText,        // an earlier call's text is the prompt's prefix: its tokens replace it
  kRerendered,  // no earlier call is a prefix of the prompt, as tokens or as text
};

struct MatchedContext {
  std::vector<int64_t> tokens;  // the prompt to generate from
  ContextMatch match = ContextMatch::kFirst;
};

// `rendered`: the prompt's tokens; `rendered_text`: the text they encode, as rendered (empty:
// decode `rendered`). The latest `max_calls` of `earlier` are tried, newest first, each as tokens
// then as text.
MatchedContext MatchContext(std::vector<int64_t> rendered, std::string_view rendered_text,
                            const std::vector<LlmCall>& earlier, const Tokenizer& tokenizer,
                            size_t max_calls = 8);

}  // namespace flywheel::gateway

#endif  // FLYWHEEL_GATEWAY_CONTEXT_MATCH_H_
