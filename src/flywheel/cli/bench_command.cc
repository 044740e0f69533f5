// flywheel bench NAME [--out FILE.json] [--quick] [--param k=v …]
#include <memory>
#include <string>
#include <vector>

#include "bench/registry.h"
#include "flywheel/cli/command.h"
#include "flywheel/core/strings.h"

namespace flywheel::cli {

void AddBenchCommand(CLI::App& app, Invocation& invocation) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Run a benchmark that compares two things in one run and writes JSON");
  bench->require_subcommand(1);
  for (const bench::BenchEntry& entry : bench::Benchmarks()) {
    struct Args {
      std::string out;
      bool quick = false;
      std::vector<std::string> params;
    };
    auto args = std::make_shared<Args>();
    CLI::App* sub = bench->add_subcommand(entry.name, entry.help);
    sub->add_option("--out", args->out, "write the JSON report here");
    sub->add_flag("--quick", args->quick, "a short run (smoke test), not for reporting");
    sub->add_option("--param", args->params, "benchmark knob, KEY=VALUE")->take_all();
    sub->callback([args, &entry, &invocation] {
      invocation.run = [args, &entry] {
        bench::BenchArgs bench_args;
        bench_args.out_path = args->out;
        bench_args.quick = args->quick;
        bench_args.source_dir = FLYWHEEL_SOURCE_DIR;
        for (const auto& p : args->params) {
          const size_t eq = p.find('=');
          if (eq == std::string::npos) {
            return ReportError(absl::InvalidArgumentError(
                StrCat("--param ", p, ": expected KEY=VALUE")));
          }
          bench_args.params[p.substr(0, eq)] = p.substr(eq + 1);
        }
        auto report = entry.run(bench_args);
        if (!report.ok()) return ReportError(report.status());
        absl::Status s = bench::EmitReport(entry.name, bench_args, *report);
        return s.ok() ? 0 : ReportError(s);
      };
    });
  }
}

}  // namespace flywheel::cli
