// Recorded agent executions (trajectory/call_log.h): JSONL call logs written by an outside agent
// harness, read by `flywheel trajectory stats` and the tree benchmark. Every execution that reads
// back is built into a prefix tree, its paths selected and packed, as the tree job does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "flywheel/trajectory/call_log.h"
#include "flywheel/trajectory/path_selection.h"
#include "flywheel/trajectory/trajectory_tree.h"
#include "flywheel/trajectory/tree_packing.h"

namespace flywheel {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Consume(const std::vector<Execution>& executions) {
  std::vector<TrajectoryTree> trees;
  std::vector<TreeTrainingItem> items;
  trees.reserve(executions.size());
  for (const Execution& e : executions) {
    absl::StatusOr<TrajectoryTree> tree = TrajectoryTree::FromExecution(e);
    if (!tree.ok()) continue;
    trees.push_back(*std::move(tree));
    const PathSelection selection = SelectPaths(trees.back().Paths(), /*j_max=*/2);
    for (const TreePath& path : selection.selected) {
      const std::vector<int32_t> nodes = trees.back().PathNodes(path);
      Check(static_cast<int32_t>(nodes.size()) == path.length);
    }
    RewardOf(e).ok();
    items.push_back(
        {&trees.back(), selection.selected, std::vector<float>(selection.selected.size(), 0.5f)});
  }
  for (TreeWeighting weighting : {TreeWeighting::kExact, TreeWeighting::kDedup}) {
    PackTrees(items, /*length=*/64, weighting, PathAggregation::kTokenMean).ok();
  }
  PackFlatPaths(items, /*length=*/64, PathAggregation::kSequenceMean).ok();
}

}  // namespace
}  // namespace flywheel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<std::vector<flywheel::Execution>> executions =
      flywheel::ReadCallLog(in, "fuzz.jsonl");
  if (!executions.ok()) return 0;
  // What reads back writes back and reads again the same.
  std::ostringstream out;
  flywheel::WriteCallLog(*executions, out);
  std::istringstream again(out.str());
  absl::StatusOr<std::vector<flywheel::Execution>> reread = flywheel::ReadCallLog(again, "again");
  if (!reread.ok() || reread->size() != executions->size()) std::abort();
  flywheel::Consume(*executions);
  return 0;
}
