// The pre-tokenizer regex of a tokenizer.json, run on RE2 (linear time) with the meaning it has
// in Hugging Face tokenizers, where Oniguruma (a backtracking engine) runs it.
//
// Two things differ between the engines and are bridged here:
//
// 1. Classes. Oniguruma's \s is Unicode White_Space (\t \n \v \f \r, space, U+0085, U+00A0,
//    U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000); RE2's is ASCII without
//    \v. \s and \S are rewritten to the explicit set. \d \w \b \h and their negations,
//    ^ and $ (line anchors in Oniguruma's Ruby syntax), inline flags other than i, backreferences,
//    nested classes and POSIX brackets have other meanings or none in RE2: they are refused,
//    not approximated.
//
// 2. Lookahead. RE2 has none, but every byte-level BPE regex in use (GPT-2, Llama-3, Qwen2/3,
//    DeepSeek, …) needs exactly one: it ends in the alternatives `\s+(?!\S)|\s+`. Under
//    leftmost-first (backtracking) semantics, at a position p where none of the earlier
//    alternatives matches and a white-space run [p, e) starts:
//      - if e is the end of the text, \s+(?!\S) matches all of [p, e);
//      - else if the run has two or more characters, \s+ backs off one character, so
//        \s+(?!\S) matches [p, e - last character): the last white-space character is left to
//        the next match (" world" keeps its space, and "a   b" splits "a", "  ", " b");
//      - else (one character before a non-space) \s+(?!\S) fails and \s+ matches [p, e).
//    So the regex runs on RE2 as `(?:earlier alternatives)|\s+`; when a match is a white-space
//    run of two or more characters that does not reach the end of the text, and the earlier
//    alternatives do not match at its start (checked with an anchored RE2 of them alone), its
//    last character is given back. That is the whole of the emulation; any other lookaround
//    is refused.
//
// Splitting follows HF's Split pre-tokenizer with behavior "Isolated": every match, and every
// stretch of text between matches, is a piece of its own.
#ifndef FLYWHEEL_TOKENIZER_SPLIT_REGEX_H_
#define FLYWHEEL_TOKENIZER_SPLIT_REGEX_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace re2 {
class RE2;
}

namespace flywheel {

// Oniguruma's \s for UTF-8: Unicode White_Space.
bool IsOnigurumaSpace(char32_t c);

// The RE2 pattern with the meaning `pattern` (no lookaround) has under Oniguruma; an error
// naming the construct when there is none.
absl::StatusOr<std::string> OnigurumaToRe2(std::string_view pattern);

class SplitRegex {
 public:
  // `pattern` is an Oniguruma regex as in tokenizer.json; `literal` makes it a plain string
  // (Split's {"String": …} pattern). Errors say what is refused.
  static absl::StatusOr<SplitRegex> Compile(std::string_view pattern, bool literal = false);
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;
  ~SplitRegex();

  // Calls `piece` for each match and each stretch between matches of valid UTF-8 `text`, in
  // order; the pieces are non-empty and cover `text`.
  void Split(std::string_view text, absl::FunctionRef<void(std::string_view)> piece) const;

  // Whether the pattern ended in \s+(?!\S)|\s+ (emulated as described above).
  bool emulates_whitespace_lookahead() const { return earlier_ != nullptr || lookahead_only_; }
  const std::string& pattern() const { return pattern_; }

 private:
  SplitRegex() = default;
  // Index just past the match that starts the white-space run [start, end), as the lookahead
  // would have it.
  size_t LookaheadEnd(std::string_view text, size_t start, size_t end) const;

  std::string pattern_;                // as given
  std::unique_ptr<re2::RE2> regex_;    // the whole pattern (lookahead dropped)
  std::unique_ptr<re2::RE2> earlier_;  // the alternatives before \s+(?!\S), when there are any
  bool lookahead_only_ = false;        // the pattern was just \s+(?!\S)|\s+
};

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_SPLIT_REGEX_H_
