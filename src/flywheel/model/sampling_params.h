// How the policy samples: temperature, top-k, top-p. Shared by the actors (which sample) and the
// learner (which must evaluate log-probs under the same distribution); see docs/sampling.md.
// Maps to the [sampling] section of a job config. No torch: the config layer includes it.
#ifndef FLYWHEEL_MODEL_SAMPLING_PARAMS_H_
#define FLYWHEEL_MODEL_SAMPLING_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct SamplingParams {
  double temperature = 1.0;
  int64_t top_k = 0;   // 0 = no top-k truncation
  double top_p = 1.0;  // 1 = no nucleus truncation

  template <typename V>
  void VisitFields(V& v) {
    v.Field("temperature", temperature, "logits are divided by this (> 0)");
    v.Field("top_k", top_k, "keep the k most likely tokens (0 = all)");
    v.Field("top_p", top_p, "keep the smallest set of tokens with this much mass (1 = all)");
  }

  absl::Status Validate() const {
    if (!(temperature > 0)) {
      return absl::InvalidArgumentError(StrCat("sampling.temperature must be > 0, got ",
                                               temperature, " (use top_k = 1 for greedy)"));
    }
    if (top_k < 0) return absl::InvalidArgumentError("sampling.top_k must be >= 0");
    if (!(top_p > 0 && top_p <= 1)) {
      return absl::InvalidArgumentError(StrCat("sampling.top_p must be in (0, 1], got ", top_p));
    }
    return absl::OkStatus();
  }

  bool truncates() const { return top_k > 0 || top_p < 1.0; }
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_SAMPLING_PARAMS_H_
