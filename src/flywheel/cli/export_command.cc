// flywheel export RUN_DIR [--step N] --out DIR [--dtype source|float32|bfloat16|float16]
//
// A run's checkpoint as a Hugging Face model directory (runtime/run_export.h).
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "flywheel/cli/command.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/hf_weights.h"
#include "flywheel/runtime/run_export.h"

namespace flywheel::cli {
namespace {

struct ExportArgs {
  std::string run_dir;
  int64_t step = -1;
  std::string out;
  std::string dtype = "source";
};

int RunExport(const ExportArgs& args) {
  RunExportOptions options;
  options.run_dir = args.run_dir;
  if (args.step >= 0) options.step = args.step;
  options.out = args.out;
  if (args.dtype != "source") {
    auto dtype = HfDtypeFromName(args.dtype);
    if (!dtype.ok()) return ReportError(Annotate(dtype.status(), "--dtype"));
    options.dtype = *dtype;
  }
  auto result = ExportRun(options);
  if (!result.ok()) return ReportError(result.status());
  std::cout << "exported " << result->checkpoint << " (step " << result->step << ") to " << args.out
            << ": " << result->architecture << ", " << result->parameters << " parameters, "
            << HfDtypeName(result->dtype) << "\n";
  return 0;
}

}  // namespace

void AddExportCommand(CLI::App& app, Invocation& invocation) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* command =
      app.add_subcommand("export",
                         "Write a run's checkpoint as a Hugging Face model directory (config.json, "
                         "model.safetensors, generation_config.json, tokenizer files)");
  command->add_option("run_dir", args->run_dir, "the run directory, runs/<name>")->required();
  command->add_option("--step", args->step, "checkpoint step (default: the newest complete one)");
  command->add_option("--out", args->out, "the directory to write (new or empty)")->required();
  command
      ->add_option("--dtype", args->dtype,
                   "model.safetensors dtype: source (model.path's, float32 without one), float32, "
                   "bfloat16, float16")
      ->capture_default_str();
  command->callback([args, &invocation] { invocation.run = [args] { return RunExport(*args); }; });
}

}  // namespace flywheel::cli
