// flywheel trajectory stats FILE.jsonl [--j-max N]
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "flywheel/cli/command.h"
#include "flywheel/core/strings.h"
#include "flywheel/trajectory/call_log.h"
#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/trajectory_tree.h"

namespace flywheel::cli {
namespace {

struct StatsArgs {
  std::string file;
  int j_max = 0;
};

int RunStats(const StatsArgs& args) {
  std::ifstream in(args.file);
  if (!in) return ReportError(absl::NotFoundError(StrCat("cannot open ", args.file)));
  auto executions = ReadCallLog(in, args.file);
  if (!executions.ok()) return ReportError(executions.status());

  std::cout << fmt::format("{:<16} {:>5} {:>5} {:>8} {:>10} {:>10} {:>7}  {}\n", "execution",
                           "calls", "paths", "selected", "path_tok", "tree_tok", "ratio",
                           "reward");
  int64_t total_path = 0, total_tree = 0;
  for (const Execution& e : *executions) {
    auto tree = TrajectoryTree::FromExecution(e);
    if (!tree.ok()) return ReportError(tree.status());
    const PathSelection selection = SelectPaths(tree->Paths(), args.j_max);
    int64_t path_tokens = 0;
    std::vector<bool> on_selected(tree->NumNodes(), false);
    for (const TreePath& p : selection.selected) {
      path_tokens += p.length;
      for (int32_t n : tree->PathNodes(p)) on_selected[n] = true;
    }
    const int64_t tree_tokens = std::count(on_selected.begin(), on_selected.end(), true);
    total_path += path_tokens;
    total_tree += tree_tokens;
    auto reward = RewardOf(e);
    const std::string reward_text =
        !reward.ok() ? "missing"
                     : fmt::format("{:.3f}{}", reward->reward,
                                   reward->from_partial_score ? " (partial)" : "");
    std::cout << fmt::format("{:<16} {:>5} {:>5} {:>8} {:>10} {:>10} {:>7.2f}  {}\n",
                             e.execution_id, e.calls.size(), tree->Paths().size(),
                             selection.selected.size(), path_tokens, tree_tokens,
                             tree_tokens > 0 ? double(path_tokens) / tree_tokens : 0.0,
                             reward_text);
  }
  std::cout << fmt::format("{} executions: {} tokens as flat paths, {} as trees ({:.2f}x)\n",
                           executions->size(), total_path, total_tree,
                           total_tree > 0 ? double(total_path) / total_tree : 0.0);
  return 0;
}

}  // namespace

void AddTrajectoryCommand(CLI::App& app, Invocation& invocation) {
  CLI::App* trajectory =
      app.add_subcommand("trajectory", "Inspect recorded agent executions (JSONL call logs)");
  trajectory->require_subcommand(1);
  auto args = std::make_shared<StatsArgs>();
  CLI::App* stats = trajectory->add_subcommand(
      "stats", "Build prefix trees and report paths, selection and tokens saved per execution");
  stats->add_option("file", args->file, "call log (docs/trajectory-processor.md)")->required();
  stats->add_option("--j-max", args->j_max, "paths selected per execution, 0 = all")
      ->capture_default_str();
  stats->callback([args, &invocation] { invocation.run = [args] { return RunStats(*args); }; });
}

}  // namespace flywheel::cli
