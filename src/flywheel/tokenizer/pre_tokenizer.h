// The pre_tokenizer of a byte-level tokenizer.json: how normalized text is cut into the pieces
// that BPE merges within. Supported, in HF's JSON form:
//
//   {"type": "ByteLevel", "add_prefix_space": b, "use_regex": b, "trim_offsets": b}
//       GPT-2's regex when use_regex; add_prefix_space puts a space before each piece that
//       does not start with one (trim_offsets only moves offsets: no effect on ids);
//   {"type": "Sequence", "pretokenizers": [Split…, ByteLevel]}
//       as Llama-3 and Qwen2/3 write it: one or more Split steps, then ByteLevel.
//   {"type": "Split", "pattern": {"Regex": r} | {"String": s}, "behavior": "Isolated",
//    "invert": false}
//
// ByteLevel must come last (its byte mapping feeds the BPE); other pre-tokenizers (Metaspace,
// Whitespace, Digits, Punctuation, …), other Split behaviors and invert = true are refused with
// their JSON path.
#ifndef FLYWHEEL_TOKENIZER_PRE_TOKENIZER_H_
#define FLYWHEEL_TOKENIZER_PRE_TOKENIZER_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "flywheel/tokenizer/split_regex.h"

namespace flywheel {

class PreTokenizer {
 public:
  // `json` is the value of the "pre_tokenizer" key.
  static absl::StatusOr<PreTokenizer> FromJson(const nlohmann::json& json);

  // Calls `piece` for each non-empty piece of valid UTF-8 `text`, in order. A piece may be a
  // temporary (with add_prefix_space): use it before returning.
  void Split(std::string_view text, absl::FunctionRef<void(std::string_view)> piece) const;

  std::string DebugString() const;

 private:
  struct Step {
    SplitRegex regex;  // Split's pattern, or GPT-2's for ByteLevel with use_regex
    bool byte_level = false;
    bool use_regex = true;          // ByteLevel only
    bool add_prefix_space = false;  // ByteLevel only
  };
  void Apply(size_t step, std::string_view text,
             absl::FunctionRef<void(std::string_view)> piece) const;

  std::vector<Step> steps_;
};

// GPT-2's pre-tokenizer regex, which ByteLevel with use_regex = true applies.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_PRE_TOKENIZER_H_
