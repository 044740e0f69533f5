#include "flywheel/env/vocabulary.h"

#include <algorithm>
#include <sstream>

namespace flywheel {

bool InVocabulary(const VocabularySpec& spec, const std::string& text) {
  if (spec.kind == VocabularySpec::kBytes) return true;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (std::find(spec.words.begin(), spec.words.end(), word) == spec.words.end()) return false;
  }
  return true;
}

}  // namespace flywheel
