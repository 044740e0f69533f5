// [sft]: a supervised stage before reinforcement learning (runtime/warm_start.h). What users do
// with real models, and what an untrained policy needs when every group of a task scores alike
// (all zero: no advantage, no gradient).
#ifndef FLYWHEEL_RUNTIME_SFT_OPTIONS_H_
#define FLYWHEEL_RUNTIME_SFT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "flywheel/core/strings.h"

namespace flywheel {

struct SftOptions {
  int64_t steps = 0;                // optimiser steps; 0 = no supervised stage
  std::string source = "expert";    // expert: the built-in task's scripted expert; jsonl: `path`
  std::string path;                 // jsonl: one {"messages": [...]} conversation a line
  int64_t episodes_per_step = 64;   // expert episodes (or conversations) per step
  double lr = 0;                    // AdamW learning rate; 0 = learner.lr
  int64_t seed = 0;                 // task stream of the expert episodes; 0 = run.seed

  template <typename V>
  void VisitFields(V& v) {
    v.Field("steps", steps, "supervised steps before reinforcement learning (0 = none)");
    v.Field("source", source,
            "expert: the built-in task's scripted expert plays the episodes; jsonl: the "
            "conversations of sft.path");
    v.Field("path", path,
            "sft.source = \"jsonl\": a file of one {\"messages\": [{\"role\", \"content\"}, "
            "...]} conversation a line (roles user, tool, assistant)");
    v.Field("episodes_per_step", episodes_per_step,
            "expert episodes (or conversations of sft.path) per supervised step");
    v.Field("lr", lr, "AdamW learning rate of the supervised stage (0 = learner.lr)");
    v.Field("seed", seed, "seed of the expert episodes' tasks (0 = run.seed)");
  }

  bool enabled() const { return steps > 0; }

  absl::Status Validate() const {
    if (steps < 0 || episodes_per_step < 1 || !(lr >= 0)) {
      return absl::InvalidArgumentError(
          StrCat("sft.steps must be >= 0, sft.episodes_per_step >= 1 and sft.lr >= 0; got ",
                 steps, ", ", episodes_per_step, ", ", lr));
    }
    if (source != "expert" && source != "jsonl") {
      return absl::InvalidArgumentError(
          StrCat("sft.source = \"", source, "\": expected \"expert\" (a built-in task's "
                 "scripted expert) or \"jsonl\" (the conversations of sft.path)"));
    }
    if ((source == "jsonl") != !path.empty()) {
      return absl::InvalidArgumentError(
          source == "jsonl" ? "sft.source = \"jsonl\" needs sft.path, the conversations' file"
                            : "sft.path is read only with sft.source = \"jsonl\"");
    }
    return absl::OkStatus();
  }
};

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_SFT_OPTIONS_H_
