#include "flywheel/runtime/policy_setup.h"

#include <spdlog/spdlog.h>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/hf_config.h"
#include "flywheel/model/hf_weights.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

absl::StatusOr<ModelOptions> ResolveModelOptions(const JobConfig& config,
                                                 const Tokenizer& tokenizer,
                                                 const std::string& tokenizer_name) {
  ModelOptions options = config.model;
  if (!options.path.empty()) {
    ASSIGN_OR_RETURN(const HfModelConfig hf, LoadHfModelConfig(options.path));
    ASSIGN_OR_RETURN(options, ApplyHfModelConfig(options, hf));
  }
  if (options.vocab_size == 0) options.vocab_size = tokenizer.vocab_size();
  if (options.vocab_size < tokenizer.vocab_size() && !options.path.empty()) {
    return absl::InvalidArgumentError(
        StrCat("model.path: ", options.path, "/config.json has vocab_size ", options.vocab_size,
               ", fewer ids than ", tokenizer_name, "'s ", tokenizer.vocab_size(),
               ": the model cannot embed every token"));
  }
  if (options.vocab_size < tokenizer.vocab_size()) {
    return absl::InvalidArgumentError(
        StrCat("model.vocab_size = ", options.vocab_size, " is smaller than ", tokenizer_name,
               "'s ", tokenizer.vocab_size(), ": set it to 0 to take the tokenizer's"));
  }
  if (options.seed == 0) options.seed = config.run.seed;
  return options;
}

absl::StatusOr<Transformer> MakeInitialModel(const ModelOptions& options) {
  // Checked first: a model that cannot go where it is asked to is not worth loading.
  ASSIGN_OR_RETURN(const torch::Device device, ModelDevice(options));
  absl::StatusOr<Transformer> model;
  if (options.path.empty()) {
    model = MakeTransformer(options);
  } else {
    HfWeightsSummary read;
    model = LoadHfModel(options.path, options, &read);
    if (!model.ok()) {
      return Annotate(model.status(), StrCat("model.path = \"", options.path, "\""));
    }
    spdlog::info(
        "model.path {}: {} parameters ({} tensors, {} MB) from {} file(s), stored as {}",
        options.path, (*model)->NumParameters(), read.tensors, read.bytes >> 20,
        read.files.size(),
        read.dtype == torch::ScalarType::Undefined ? "mixed dtypes" : HfDtypeName(read.dtype));
  }
  if (!model.ok() || device.is_cpu()) return model;
  RETURN_IF_ERROR(TorchCall(StrCat("move the model to ", options.device),
                            [&] { (*model)->to(device); }));
  return model;
}

absl::StatusOr<Transformer> FrozenCopy(const ModelOptions& options,
                                       std::vector<torch::Tensor> parameters) {
  Transformer copy{nullptr};
  RETURN_IF_ERROR(TorchCall("freeze a copy of the model", [&] {
    copy = Transformer(options);
    std::vector<torch::Tensor> own = copy->parameters();
    TORCH_CHECK(own.size() == parameters.size(), "got ", parameters.size(),
                " parameters for a model of ", own.size());
    // The given tensors become the copy's parameters (as Module::to swaps them): no second copy
    // of the weights on their device.
    for (size_t i = 0; i < own.size(); ++i) {
      own[i].set_data(parameters[i]);
      own[i].set_requires_grad(false);
    }
    if (!own.empty()) copy->to(parameters.front().device());  // the buffers
  }));
  return copy;
}

}  // namespace flywheel
