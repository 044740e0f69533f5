#include "flywheel/trajectory/tree_packing.h"

#include <algorithm>
#include <numeric>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// A segment: nodes to lay out contiguously in one row, with segment-local parents.
struct Segment {
  std::vector<int32_t> tree_nodes;     // indices into the item's tree
  std::vector<int64_t> local_parents;  // -1 for a root
  std::vector<int32_t> positions;
  size_t item = 0;
  // (segment-local col, advantage, weight)
  struct Term {
    int32_t col;
    float advantage;
    float weight;
  };
  std::vector<Term> terms;
};

absl::Status CheckItem(const TreeTrainingItem& item) {
  if (item.tree == nullptr) return absl::InvalidArgumentError("tree training item without tree");
  if (item.paths.size() != item.advantages.size()) {
    return absl::InvalidArgumentError(StrCat("execution '", item.tree->execution_id(), "': ",
                                             item.paths.size(), " paths but ",
                                             item.advantages.size(), " advantages"));
  }
  return absl::OkStatus();
}

int64_t TrainableTokens(const TrajectoryTree& tree, const TreePath& path) {
  int64_t n = 0;
  for (int32_t node : tree.PathNodes(path)) n += tree.nodes()[node].trainable ? 1 : 0;
  return n;
}

// Weight per (path, trainable token) for the flat-path aggregation reproduced by `exact`.
absl::StatusOr<std::vector<std::vector<float>>> PathWeights(
    std::span<const TreeTrainingItem> items, PathAggregation aggregation) {
  int64_t total_tokens = 0;
  int64_t total_paths = 0;
  for (const auto& item : items) {
    for (const auto& p : item.paths) {
      total_tokens += TrainableTokens(*item.tree, p);
      ++total_paths;
    }
  }
  if (total_tokens == 0) return absl::InvalidArgumentError("no trainable tokens to pack");
  std::vector<std::vector<float>> weights(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    for (const auto& p : items[i].paths) {
      const int64_t n = TrainableTokens(*items[i].tree, p);
      float w = 0.0f;
      if (aggregation == PathAggregation::kTokenMean) {
        w = 1.0f / static_cast<float>(total_tokens);
      } else if (n > 0) {
        w = 1.0f / (static_cast<float>(n) * static_cast<float>(total_paths));
      }
      weights[i].push_back(w);
    }
  }
  return weights;
}

absl::Status CheckScorable(const TrajectoryTree& tree, int32_t node) {
  if (tree.nodes()[node].parent < 0) {
    return absl::InvalidArgumentError(StrCat(
        "execution '", tree.execution_id(),
        "': a trainable token at the start of a path cannot be scored (nothing predicts it); "
        "paths must start with context such as BOS"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PackedTrees> Layout(std::vector<Segment> segments, int64_t length,
                                   const std::span<const TreeTrainingItem> items) {
  // first-fit-decreasing over rows
  std::vector<size_t> order(segments.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return segments[a].tree_nodes.size() > segments[b].tree_nodes.size();
  });
  std::vector<int64_t> row_fill;
  std::vector<std::pair<int64_t, int64_t>> placement(segments.size());  // row, start col
  for (size_t s : order) {
    const int64_t size = static_cast<int64_t>(segments[s].tree_nodes.size());
    if (size > length) {
      return absl::InvalidArgumentError(
          StrCat("execution '", items[segments[s].item].tree->execution_id(), "' needs ", size,
                 " tokens packed, more than the row length ", length));
    }
    size_t row = 0;
    while (row < row_fill.size() && row_fill[row] + size > length) ++row;
    if (row == row_fill.size()) row_fill.push_back(0);
    placement[s] = {static_cast<int64_t>(row), row_fill[row]};
    row_fill[row] += size;
  }

  PackedTrees out;
  out.rows = static_cast<int64_t>(row_fill.size());
  out.length = length;
  const size_t cells = static_cast<size_t>(out.rows * length);
  out.tokens.assign(cells, 0);
  out.positions.assign(cells, 0);
  out.trainable.assign(cells, 0);
  out.logprobs.assign(cells, kNoLogprob);
  out.versions.assign(cells, kNoVersion);
  out.parents.assign(out.rows, {});
  for (int64_t r = 0; r < out.rows; ++r) out.parents[r].assign(row_fill[r], -1);

  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& seg = segments[s];
    const TrajectoryTree& tree = *items[seg.item].tree;
    const auto [row, start] = placement[s];
    for (size_t k = 0; k < seg.tree_nodes.size(); ++k) {
      const TreeNode& node = tree.nodes()[seg.tree_nodes[k]];
      const int64_t col = start + static_cast<int64_t>(k);
      const size_t at = static_cast<size_t>(out.Index(row, col));
      out.tokens[at] = node.token;
      out.positions[at] = seg.positions[k];
      out.trainable[at] = node.trainable ? 1 : 0;
      out.logprobs[at] = node.logprob;
      out.versions[at] = node.version;
      out.parents[row][col] = seg.local_parents[k] < 0 ? -1 : start + seg.local_parents[k];
    }
    for (const auto& term : seg.terms) {
      out.contributions.push_back(
          {static_cast<int32_t>(row), static_cast<int32_t>(start + term.col), term.advantage,
           term.weight});
    }
    out.real_tokens += static_cast<int64_t>(seg.tree_nodes.size());
  }
  return out;
}

}  // namespace

absl::StatusOr<PackedTrees> PackTrees(std::span<const TreeTrainingItem> items, int64_t length,
                                      TreeWeighting weighting, PathAggregation aggregation) {
  for (const auto& item : items) {
    if (auto s = CheckItem(item); !s.ok()) return s;
  }
  auto path_weights = PathWeights(items, aggregation);
  if (!path_weights.ok()) return path_weights.status();

  std::vector<Segment> segments;
  for (size_t i = 0; i < items.size(); ++i) {
    const TrajectoryTree& tree = *items[i].tree;
    // Nodes on selected paths, kept in creation order (a parent is always created first).
    std::vector<int32_t> local(tree.NumNodes(), -1);
    std::vector<std::vector<size_t>> paths_through(tree.NumNodes());
    for (size_t p = 0; p < items[i].paths.size(); ++p) {
      for (int32_t n : tree.PathNodes(items[i].paths[p])) paths_through[n].push_back(p);
    }
    Segment seg;
    seg.item = i;
    for (int32_t n = 0; n < tree.NumNodes(); ++n) {
      if (paths_through[n].empty()) continue;
      local[n] = static_cast<int32_t>(seg.tree_nodes.size());
      seg.tree_nodes.push_back(n);
      const int32_t parent = tree.nodes()[n].parent;
      seg.local_parents.push_back(parent < 0 ? -1 : local[parent]);
      seg.positions.push_back(tree.nodes()[n].depth);
    }
    int64_t unique_trainable = 0;
    for (int32_t n : seg.tree_nodes) unique_trainable += tree.nodes()[n].trainable ? 1 : 0;
    for (int32_t n : seg.tree_nodes) {
      if (!tree.nodes()[n].trainable) continue;
      if (auto s = CheckScorable(tree, n); !s.ok()) return s;
      const auto& through = paths_through[n];
      if (weighting == TreeWeighting::kExact) {
        for (size_t p : through) {
          seg.terms.push_back({local[n], items[i].advantages[p], (*path_weights)[i][p]});
        }
      } else {
        float mean = 0.0f;
        for (size_t p : through) mean += items[i].advantages[p];
        mean /= static_cast<float>(through.size());
        const float w = 1.0f / (static_cast<float>(unique_trainable) *
                                static_cast<float>(items.size()));
        seg.terms.push_back({local[n], mean, w});
      }
    }
    segments.push_back(std::move(seg));
  }
  return Layout(std::move(segments), length, items);
}

absl::StatusOr<PackedTrees> PackFlatPaths(std::span<const TreeTrainingItem> items,
                                          int64_t length, PathAggregation aggregation) {
  for (const auto& item : items) {
    if (auto s = CheckItem(item); !s.ok()) return s;
  }
  auto path_weights = PathWeights(items, aggregation);
  if (!path_weights.ok()) return path_weights.status();
  std::vector<Segment> segments;
  for (size_t i = 0; i < items.size(); ++i) {
    const TrajectoryTree& tree = *items[i].tree;
    for (size_t p = 0; p < items[i].paths.size(); ++p) {
      Segment seg;
      seg.item = i;
      seg.tree_nodes = tree.PathNodes(items[i].paths[p]);
      for (size_t k = 0; k < seg.tree_nodes.size(); ++k) {
        seg.local_parents.push_back(static_cast<int64_t>(k) - 1);
        seg.positions.push_back(static_cast<int32_t>(k));
        const int32_t n = seg.tree_nodes[k];
        if (!tree.nodes()[n].trainable) continue;
        if (auto s = CheckScorable(tree, n); !s.ok()) return s;
        seg.terms.push_back({static_cast<int32_t>(k), items[i].advantages[p],
                             (*path_weights)[i][p]});
      }
      segments.push_back(std::move(seg));
    }
  }
  return Layout(std::move(segments), length, items);
}

}  // namespace flywheel
