// flywheel chaos CONFIG --minutes M --seed S --out FILE.json [--actors N] [--work-dir DIR]
//                [--mean-gap SECONDS] [--quiet-tail SECONDS] [--recovery-bound SECONDS]
//                [--set k=v …]
//
// Runs the job as processes (a durable buffer, a learner, N actors behind a faulty network
// proxy) and breaks it at random times from the seed: SIGKILL and restart, SIGSTOP/SIGCONT,
// delayed, refused and cut connections. Then checks that nothing acknowledged was lost and
// nothing trained twice, and writes the report (docs/reliability.md). Exit 0 when every
// invariant held, 1 when one did not, 2 for bad arguments.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/chaos/chaos_job.h"
#include "flywheel/cli/command.h"

namespace flywheel::cli {
namespace {

struct ChaosArgs {
  std::string config;
  double minutes = 5;
  uint64_t seed = 1;
  std::string out;
  int actors = 2;
  std::string work_dir;
  double mean_gap_s = 10;
  double quiet_tail_s = 20;
  double recovery_bound_s = 60;
  std::vector<std::string> overrides;
  std::string breakage;  // tests: idempotency | leases
};

int RunChaosCommand(const ChaosArgs& args) {
  chaos::ChaosOptions options;
  char self[4096] = {0};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return ReportError(absl::InternalError("chaos: cannot read /proc/self/exe"));
  options.flywheel = std::string(self, static_cast<size_t>(n));
  options.config = args.config;
  options.overrides = args.overrides;
  options.duration = absl::Seconds(args.minutes * 60);
  options.quiet_tail = absl::Seconds(args.quiet_tail_s);
  options.recovery_bound = absl::Seconds(args.recovery_bound_s);
  options.seed = args.seed;
  options.actors = args.actors;
  options.faults.mean_gap = absl::Seconds(args.mean_gap_s);
  if (args.breakage == "idempotency") {
    options.breakage = chaos::Breakage::kIdempotency;
  } else if (args.breakage == "leases") {
    options.breakage = chaos::Breakage::kLeases;
  } else if (!args.breakage.empty()) {
    return ReportError(absl::InvalidArgumentError(
        "--break takes idempotency or leases (the protection to switch off)"));
  }
  options.work_dir = args.work_dir;
  if (options.work_dir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "flywheel-chaos-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return ReportError(absl::InternalError("chaos: cannot create a work directory"));
    }
    options.work_dir = pattern;
  }
  absl::StatusOr<nlohmann::json> report = chaos::RunChaos(options);
  if (!report.ok()) return ReportError(report.status());
  std::ofstream out(args.out);
  out << report->dump(2) << "\n";
  out.close();
  if (!out) {
    return ReportError(absl::InternalError("chaos: cannot write --out " + args.out));
  }
  std::cout << "report: " << args.out << " (work directory " << options.work_dir << ")"
            << std::endl;
  return (*report)["ok"].get<bool>() ? 0 : 1;
}

}  // namespace

void AddChaosCommand(CLI::App& app, Invocation& invocation) {
  auto args = std::make_shared<ChaosArgs>();
  CLI::App* chaos = app.add_subcommand(
      "chaos",
      "Run the multi-process job under random kills, freezes and network faults, and "
      "check that nothing acknowledged is lost or trained twice");
  chaos->add_option("config", args->config, "job config (TOML)")->required();
  chaos->add_option("--minutes", args->minutes, "minutes of faults, once the learner stepped")
      ->capture_default_str();
  chaos->add_option("--seed", args->seed, "seed of the fault schedule")->capture_default_str();
  chaos->add_option("--out", args->out, "write the report (JSON) here")->required();
  chaos->add_option("--actors", args->actors, "actor processes")->capture_default_str();
  chaos->add_option("--work-dir", args->work_dir,
                    "empty or new directory for logs, store and run (default: a new temp dir)");
  chaos->add_option("--mean-gap", args->mean_gap_s, "mean seconds between two faults")
      ->capture_default_str();
  chaos
      ->add_option("--quiet-tail", args->quiet_tail_s,
                   "seconds without faults at the end, for every process to recover")
      ->capture_default_str();
  chaos
      ->add_option("--recovery-bound", args->recovery_bound_s,
                   "seconds a restarted process may take to be back at work")
      ->capture_default_str();
  chaos->add_option("--set", args->overrides, "override a key for every process")->take_all();
  chaos
      ->add_option("--break", args->breakage,
                   "switch a protection off to see the run fail: idempotency | leases (tests)")
      ->group("");
  chaos->callback(
      [args, &invocation] { invocation.run = [args] { return RunChaosCommand(*args); }; });
}

}  // namespace flywheel::cli
