#include "flywheel/runtime/run_export.h"

#include <algorithm>
#include <vector>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/sharded_checkpoint.h"
#include "flywheel/learner/sharding.h"
#include "flywheel/model/hf_config.h"
#include "flywheel/model/hf_export.h"
#include "flywheel/model/hf_weights.h"
#include "flywheel/model/mapped_safetensors.h"
#include "flywheel/model/safetensors.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

bool IsSharded(const fs::path& checkpoint) { return fs::exists(checkpoint / kShardManifestFile); }

// The run's vocabulary size when its config says 0 (taken from the tokenizer at run time): from
// the embedding's rows, or from the length of a sharded checkpoint's "root" unit (embedding, final
// norm and, untied, the LM head: V·h·(1 or 2) + h).
absl::StatusOr<int64_t> CheckpointVocabSize(const fs::path& checkpoint, const ModelOptions& o) {
  if (!IsSharded(checkpoint)) {
    ASSIGN_OR_RETURN(const auto file,
                     MappedSafetensors::Open((checkpoint / kCheckpointModelFile).string()));
    const MappedSafetensors::Entry* embed = file->Find("model.embed_tokens.weight");
    if (embed == nullptr || embed->shape.size() != 2) {
      return absl::DataLossError(
          StrCat(file->path(), ": no [V, hidden] model.embed_tokens.weight"));
    }
    return embed->shape[0];
  }
  ASSIGN_OR_RETURN(const TrainerShard whole, ReadWholeUnits(checkpoint.string()));
  const auto root = std::find(whole.unit_names.begin(), whole.unit_names.end(), "root");
  if (root == whole.unit_names.end()) {
    return absl::DataLossError(StrCat(checkpoint.string(), ": no \"root\" unit"));
  }
  const int64_t length = whole.unit_lengths[root - whole.unit_names.begin()];
  const int64_t per_token = o.hidden_size * (o.tie_embeddings ? 1 : 2);
  if ((length - o.hidden_size) % per_token != 0) {
    return absl::DataLossError(StrCat(checkpoint.string(), ": root unit of ", length,
                                      " elements does not fit hidden_size ", o.hidden_size));
  }
  return (length - o.hidden_size) / per_token;
}

// A sharded checkpoint's whole units into the model's parameters (the learner's unit layout).
absl::Status LoadShardedWeights(const fs::path& checkpoint, TransformerImpl& model) {
  ASSIGN_OR_RETURN(const TrainerShard whole, ReadWholeUnits(checkpoint.string()));
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  for (const auto& item : model.named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  const std::vector<ShardUnit> units = TransformerUnits(names);
  if (units.size() != whole.unit_names.size()) {
    return absl::DataLossError(StrCat(checkpoint.string(), ": ", whole.unit_names.size(),
                                      " units, the run's model has ", units.size()));
  }
  return TorchCall(StrCat("export: unflattening ", checkpoint.string()), [&] {
    for (size_t u = 0; u < units.size(); ++u) {
      std::vector<torch::Tensor> unit;
      int64_t length = 0;
      for (int64_t i : units[u].parameters) {
        unit.push_back(params[i]);
        length += params[i].numel();
      }
      TORCH_CHECK(whole.unit_names[u] == units[u].name && whole.unit_lengths[u] == length, "unit ",
                  u, " is ", whole.unit_names[u], " of ", whole.unit_lengths[u],
                  " elements; the run's model has ", units[u].name, " of ", length);
      UnflattenInto(whole.params[u], unit);
    }
  });
}

absl::StatusOr<int64_t> ChooseStep(const fs::path& run_dir, std::optional<int64_t> step,
                                   CheckpointManager& checkpoints) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> steps, checkpoints.CompleteSteps());
  if (steps.empty()) {
    return absl::NotFoundError(StrCat("export: no complete checkpoint in ",
                                      (run_dir / "checkpoints").string(),
                                      " (runs write them every learner.checkpoint_every steps)"));
  }
  if (!step) return steps.back();
  if (std::find(steps.begin(), steps.end(), *step) == steps.end()) {
    return absl::NotFoundError(StrCat("export: --step ", *step, ": no complete checkpoint; ",
                                      (run_dir / "checkpoints").string(), " has steps ",
                                      Join(steps, ", ")));
  }
  return *step;
}

}  // namespace

absl::StatusOr<RunExportResult> ExportRun(const RunExportOptions& options) {
  const fs::path config_file = options.run_dir / "config.toml";
  if (!fs::exists(config_file)) {
    return absl::NotFoundError(
        StrCat("export: ", options.run_dir.string(), " is not a run directory (no config.toml)"));
  }
  ASSIGN_OR_RETURN(const JobConfig config, LoadJobConfig(config_file.string()));
  ModelOptions model_options = config.model;
  if (!model_options.path.empty()) {
    ASSIGN_OR_RETURN(const HfModelConfig hf, LoadHfModelConfig(model_options.path));
    ASSIGN_OR_RETURN(model_options, ApplyHfModelConfig(model_options, hf));
  }
  CheckpointManager checkpoints(
      CheckpointOptions{(options.run_dir / "checkpoints").string(), config.learner.keep_last});
  RunExportResult result;
  ASSIGN_OR_RETURN(result.step, ChooseStep(options.run_dir, options.step, checkpoints));
  const fs::path checkpoint = checkpoints.PathFor(result.step);
  result.checkpoint = checkpoint.string();
  if (model_options.vocab_size == 0) {
    ASSIGN_OR_RETURN(model_options.vocab_size, CheckpointVocabSize(checkpoint, model_options));
  }
  ASSIGN_OR_RETURN(Transformer model, TorchCallOr("export: building the model",
                                                  [&] { return Transformer(model_options); }));
  if (IsSharded(checkpoint)) {
    RETURN_IF_ERROR(LoadShardedWeights(checkpoint, *model));
  } else {
    RETURN_IF_ERROR(LoadStateDict((checkpoint / kCheckpointModelFile).string(), *model));
  }
  HfExportOptions export_options;
  export_options.source_dir = model_options.path;
  if (options.dtype) {
    export_options.dtype = *options.dtype;
  } else if (!model_options.path.empty()) {
    ASSIGN_OR_RETURN(export_options.dtype, HfSourceDtype(model_options.path));
  }
  RETURN_IF_ERROR(ExportHfModelDirectory(*model, export_options, options.out));
  ASSIGN_OR_RETURN(const HfModelConfig written, LoadHfModelConfig(options.out));
  result.architecture = written.architecture;
  result.dtype = export_options.dtype;
  result.parameters = model->NumParameters();
  return result;
}

}  // namespace flywheel
