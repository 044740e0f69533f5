#include "flywheel/actor/env_tokenizer.h"

#include "flywheel/model/byte_tokenizer.h"
#include "flywheel/model/word_tokenizer.h"

namespace flywheel {

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const VocabularySpec& vocabulary) {
  if (vocabulary.kind == VocabularySpec::kBytes) return std::make_unique<ByteTokenizer>();
  auto words = WordTokenizer::Create(vocabulary.words);
  if (!words.ok()) return words.status();
  return std::unique_ptr<Tokenizer>(std::move(*words));
}

}  // namespace flywheel
