// Packs the selected paths of executions into fixed-shape rows for training, either as trees
// (each shared prefix once; ancestor attention mask, positions = depth) or as flat paths (one
// causal document per path) — the same output type, so both run through the same loss.
//
//   row 0: [ tree e1 (nodes in topological order) | tree e2 | pad ]
//   row 1: [ tree e3                                  | pad       ]
//
// Items of one group (a GRPO group: executions of one task instance, one prompt) may share a
// segment: their trees are laid out as one, so the prompt and whatever else they have in common
// is computed once for the group rather than once per execution. Each item keeps its own
// contributions (advantage, weight, behaviour log-prob), so the loss is unchanged.
//
// A token's log-prob is read from the logits at its parent (its parent predicts it); so a
// contribution refers to a (row, col) whose parent is in the same row.
//
// Loss weighting (a contribution is one (token, advantage, weight) term of the loss
// Σ weight · ℓ(token, advantage)):
//   exact — one contribution per (selected path, trainable token of it), with the weight the
//           flat-path aggregation would give: the gradient equals training each path separately.
//   dedup — one contribution per unique trainable token, advantage averaged over the selected
//           paths through it, weight 1 / (unique trainable tokens of its execution × executions)
//           (QwenGyre: count a shared token once; mean within an execution, then across).
#ifndef FLYWHEEL_TRAJECTORY_TREE_PACKING_H_
#define FLYWHEEL_TRAJECTORY_TREE_PACKING_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/trajectory/trajectory_tree.h"

namespace flywheel {

enum class TreeWeighting { kExact, kDedup };
// How a batch of executions is laid out: one tree per execution, one tree per group of
// executions (their common prefixes once), or every path its own causal document.
enum class TreePacking { kTree, kGroup, kFlat };
// How the flat-path loss is aggregated, which `exact` reproduces.
enum class PathAggregation { kTokenMean, kSequenceMean };

// One execution ready to pack: its tree, the selected paths and one advantage per path.
struct TreeTrainingItem {
  const TrajectoryTree* tree = nullptr;
  std::vector<TreePath> paths;
  std::vector<float> advantages;
  // PackTrees lays items of the same group >= 0 out as one segment (shared prefixes once);
  // -1 = a segment of its own.
  int64_t group = -1;
};

struct PackedTrees {
  struct Contribution {
    int32_t row = 0;
    int32_t col = 0;
    float advantage = 0.0f;
    float weight = 0.0f;
    float behaviour_logprob = 0.0f;  // log μ of the path that generated it
  };

  int64_t rows = 0;
  int64_t length = 0;
  // [rows × length], row-major; padding has token 0, parent -1, position 0.
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;  // depth in the tree (flat: index in the path)
  // parents[row][col] = col of the parent within the row, -1 for a root; one entry per real
  // (non-padding) token, in column order. This is what the tree attention layout takes.
  std::vector<std::vector<int64_t>> parents;
  std::vector<Contribution> contributions;
  int64_t real_tokens = 0;  // non-padding tokens: what forward/backward actually compute

  int64_t Index(int64_t row, int64_t col) const { return row * length + col; }
};

// Each item's tree (or group's trees) becomes one segment of a row (first-fit-decreasing over
// rows of `length`).
absl::StatusOr<PackedTrees> PackTrees(std::span<const TreeTrainingItem> items, int64_t length,
                                      TreeWeighting weighting, PathAggregation aggregation);

// The baseline: every selected path is its own causal document (shared prefixes repeated).
absl::StatusOr<PackedTrees> PackFlatPaths(std::span<const TreeTrainingItem> items,
                                          int64_t length, PathAggregation aggregation);

// PackTrees (`flat`: PackFlatPaths) with the row length chosen: rows exactly as long as the
// largest segment (rounded up to `row_multiple`) leave the end of a row empty whenever the next
// segment does not fit, and the projections and MLP compute padding like any token, so 1.5 and
// 2 times that are tried too and the length with the fewest cells is kept.
absl::StatusOr<PackedTrees> PackRows(std::span<const TreeTrainingItem> items, bool flat,
                                     TreeWeighting weighting, PathAggregation aggregation,
                                     int64_t row_multiple);

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_TREE_PACKING_H_
