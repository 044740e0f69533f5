// `flywheel export`: one checkpoint of a training run as a Hugging Face model directory.
//
//   runs/<name>/config.toml                   the run's [model] (model.path, the shape)
//   runs/<name>/checkpoints/step-N/           model.safetensors (+ trainer state), or the
//                                             manifest and shards of a sharded checkpoint
//        │  the weights, into a model of the run's shape
//        ▼
//   OUT/  config.json, model.safetensors, generation_config.json, tokenizer files
//         (ExportHfModelDirectory, model/hf_export.h)
//
// A run that started from model.path exports that directory's architecture, keys, dtype and
// tokenizer files; a model flywheel initialised exports as LlamaForCausalLM in float32.
// model.path is read again at export time (relative paths from the working directory, as the
// run read it), so it must still hold the same model.
#ifndef FLYWHEEL_RUNTIME_RUN_EXPORT_H_
#define FLYWHEEL_RUNTIME_RUN_EXPORT_H_

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace flywheel {

struct RunExportOptions {
  std::filesystem::path run_dir;  // runs/<name>
  std::optional<int64_t> step;    // unset: the newest complete checkpoint
  std::filesystem::path out;      // must not exist or be empty
  // model.safetensors' dtype; unset: the source directory's (float32 without model.path).
  std::optional<torch::ScalarType> dtype;
};

struct RunExportResult {
  int64_t step = 0;
  std::string checkpoint;    // the directory read
  std::string architecture;  // of the written config.json
  torch::ScalarType dtype = torch::kFloat32;
  int64_t parameters = 0;
};

absl::StatusOr<RunExportResult> ExportRun(const RunExportOptions& options);

}  // namespace flywheel

#endif  // FLYWHEEL_RUNTIME_RUN_EXPORT_H_
