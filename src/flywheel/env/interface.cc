#include "flywheel/env/interface.h"

#include <algorithm>
#include <sstream>

namespace flywheel {

std::string_view EpisodeEndName(EpisodeEnd end) {
  switch (end) {
    case EpisodeEnd::kRunning:
      return "running";
    case EpisodeEnd::kDone:
      return "done";
    case EpisodeEnd::kTimeout:
      return "timeout";
    case EpisodeEnd::kEnvError:
      return "env-error";
    case EpisodeEnd::kProtocolError:
      return "protocol-error";
  }
  return "?";
}

StepResult StepResult::Failure(EpisodeEnd end, std::string error,
                               std::optional<double> partial_score) {
  StepResult r;
  r.done = true;
  r.end = end;
  r.error = std::move(error);
  r.partial_score = partial_score;
  return r;
}

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
