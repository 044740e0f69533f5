// What the learner and actor processes of one job must agree on to exchange weights: the
// tokenizer of the environment and the model options resolved against it.
#ifndef FLYWHEEL_RUNTIME_POLICY_SETUP_H_
#define FLYWHEEL_RUNTIME_POLICY_SETUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/model/model_options.h"
#include "flywheel/model/tokenizer.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {

// model.vocab_size 0 takes the tokenizer's; a smaller one is an error; model.seed 0 takes
// run.seed (as `flywheel train` does).
absl::StatusOr<ModelOptions> ResolveModelOptions(const JobConfig& config,
                                                 const Tokenizer& tokenizer,
                                                 const std::string& task_name);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_POLICY_SETUP_H_
