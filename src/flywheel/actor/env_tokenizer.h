// The policy's tokenizer for an environment's declared vocabulary: word-level for a closed word
// list (small vocabularies train fast), byte-level for free text.
#ifndef FLYWHEEL_ACTOR_ENV_TOKENIZER_H_
#define FLYWHEEL_ACTOR_ENV_TOKENIZER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/env/vocabulary.h"
#include "flywheel/model/tokenizer.h"

namespace flywheel {

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const VocabularySpec& vocabulary);

}  // namespace flywheel

#endif  // FLYWHEEL_ACTOR_ENV_TOKENIZER_H_
