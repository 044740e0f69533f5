#include "flywheel/env/interface.h"

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

}  // namespace flywheel
