#include "flywheel/runtime/policy_setup.h"

#include "flywheel/core/strings.h"

namespace flywheel {

absl::StatusOr<ModelOptions> ResolveModelOptions(const JobConfig& config,
                                                 const Tokenizer& tokenizer,
                                                 const std::string& task_name) {
  ModelOptions options = config.model;
  if (options.vocab_size == 0) options.vocab_size = tokenizer.vocab_size();
  if (options.vocab_size < tokenizer.vocab_size()) {
    return absl::InvalidArgumentError(
        StrCat("model.vocab_size = ", options.vocab_size, " is smaller than the ", task_name,
               " tokenizer's ", tokenizer.vocab_size(), ": set it to 0 to take the tokenizer's"));
  }
  if (options.seed == 0) options.seed = config.run.seed;
  return options;
}

}  // namespace flywheel
