// flywheel config print FILE [--set k=v …]
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/cli/command.h"
#include "flywheel/runtime/job_config.h"

namespace flywheel::cli {

void AddConfigCommand(CLI::App& app, Invocation& invocation) {
  CLI::App* config = app.add_subcommand("config", "Inspect job configuration files");
  config->require_subcommand(1);

  struct Args {
    std::string file;
    std::vector<std::string> overrides;
  };
  auto args = std::make_shared<Args>();
  CLI::App* print = config->add_subcommand(
      "print", "Check a job config and print the effective config with every default filled in");
  print->add_option("file", args->file, "job config (TOML)")->required();
  print->add_option("--set", args->overrides, "override a key, e.g. --set learner.lr=3e-4")
      ->take_all();
  print->callback([args, &invocation] {
    invocation.run = [args] {
      auto job = LoadJobConfig(args->file, args->overrides);
      if (!job.ok()) return ReportError(job.status());
      std::cout << "# effective config of " << args->file << "\n" << FormatJobConfig(*job);
      return 0;
    };
  });
}

}  // namespace flywheel::cli
