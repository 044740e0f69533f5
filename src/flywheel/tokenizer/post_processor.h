// The post_processor of a tokenizer.json, reduced to what it does to the ids of one sequence:
// the special tokens a TemplateProcessing puts around it ("<|begin_of_text|> $A" gives
// Llama-3's BOS). ByteLevel only trims offsets and adds nothing. Supported: null, ByteLevel,
// TemplateProcessing, and a Sequence of those; RobertaProcessing, BertProcessing and others are
// refused. A template's "pair" entry is checked to be an array but has no use: flywheel encodes
// one sequence at a time.
#ifndef FLYWHEEL_TOKENIZER_POST_PROCESSOR_H_
#define FLYWHEEL_TOKENIZER_POST_PROCESSOR_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace flywheel {

struct SingleSequenceTemplate {
  std::vector<int64_t> prefix;  // special tokens before the text
  std::vector<int64_t> suffix;  // and after it
  std::string description;      // "ByteLevel", "TemplateProcessing(<|begin_of_text|> $A)", …
};

// `json` is the value of the "post_processor" key.
absl::StatusOr<SingleSequenceTemplate> PostProcessorFromJson(const nlohmann::json& json);

}  // namespace flywheel

#endif  // FLYWHEEL_TOKENIZER_POST_PROCESSOR_H_
