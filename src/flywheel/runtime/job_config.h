// The whole job's configuration: one TOML file, one section per component, each bound to that
// component's Options struct. The file is the documentation of every knob:
// `flywheel config print FILE` shows it with every default filled in.
#ifndef FLYWHEEL_RUNTIME_JOB_CONFIG_H_
#define FLYWHEEL_RUNTIME_JOB_CONFIG_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/actor/actor_options.h"
#include "flywheel/env/env_options.h"
#include "flywheel/gateway/gateway_options.h"
#include "flywheel/learner/learner_options.h"
#include "flywheel/buffer/buffer_options.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/sampling_params.h"
#include "flywheel/runtime/run_options.h"
#include "flywheel/runtime/sft_options.h"
#include "flywheel/runtime/tree_job_options.h"
#include "flywheel/scheduler/scheduler_options.h"

namespace flywheel {

struct JobConfig {
  RunOptions run;
  ModelOptions model;
  EnvOptions env;
  SamplingParams sampling;
  ActorOptions actor;
  LearnerOptions learner;
  BufferOptions buffer;
  TreeJobOptions tree;
  SchedulerOptions scheduler;
  SftOptions sft;
  GatewayOptions gateway;

  template <typename V>
  void VisitFields(V& v) {
    v.Section("run", run);
    v.Section("model", model);
    v.Section("env", env);
    v.Section("sampling", sampling);
    v.Section("actor", actor);
    v.Section("learner", learner);
    v.Section("buffer", buffer);
    v.Section("tree", tree);
    v.Section("scheduler", scheduler);
    v.Section("sft", sft);
    v.Section("gateway", gateway);
  }

  // Validates every section, then the constraints between sections.
  absl::Status Validate() const;
};

// Reads `path`, applies "--set key=value" overrides in order, binds and validates. Errors name
// the file (or --set), the key path and, for unknown keys, the closest known key.
absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path,
                                        const std::vector<std::string>& overrides = {});
// The same for TOML text already read; `source` names it in errors.
absl::StatusOr<JobConfig> ParseJobConfig(std::string_view text, std::string_view source,
                                         const std::vector<std::string>& overrides = {});

// The effective configuration as TOML, with a comment on every key.
std::string FormatJobConfig(const JobConfig& config);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_JOB_CONFIG_H_
