#include "flywheel/trajectory/tree_packing.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// A segment: tokens to lay out contiguously in one row, with segment-local parents.
struct Segment {
  std::vector<int32_t> tokens;
  std::vector<int64_t> local_parents;  // -1 for a root
  std::vector<int32_t> positions;
  std::string name;  // for errors: the (first) execution laid out in it
  struct Term {
    int32_t col;  // segment-local
    float advantage;
    float weight;
    float behaviour_logprob;
  };
  std::vector<Term> terms;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
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

// Weight per (path, trainable token) for the flat-path aggregation reproduced by `exact`, once
// every item is checked.
absl::StatusOr<std::vector<std::vector<float>>> PathWeights(
    std::span<const TreeTrainingItem> items, PathAggregation aggregation) {
  for (const auto& item : items) {
    if (auto s = CheckItem(item); !s.ok()) return s;
  }
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

absl::StatusOr<PackedTrees> Layout(std::span<const Segment> segments, int64_t length) {
  // first-fit-decreasing over rows
  std::vector<size_t> order(segments.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return segments[a].size() > segments[b].size(); });
  std::vector<int64_t> row_fill;
  std::vector<std::pair<int64_t, int64_t>> placement(segments.size());  // row, start col
  for (size_t s : order) {
    const int64_t size = segments[s].size();
    if (size > length) {
      return absl::InvalidArgumentError(StrCat("execution '", segments[s].name, "' needs ", size,
                                               " tokens packed, more than the row length ",
                                               length));
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
  out.parents.assign(out.rows, {});
  for (int64_t r = 0; r < out.rows; ++r) out.parents[r].assign(row_fill[r], -1);

  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& seg = segments[s];
    const auto [row, start] = placement[s];
    for (int64_t k = 0; k < seg.size(); ++k) {
      const size_t at = static_cast<size_t>(out.Index(row, start + k));
      out.tokens[at] = seg.tokens[k];
      out.positions[at] = seg.positions[k];
      out.parents[row][start + k] = seg.local_parents[k] < 0 ? -1 : start + seg.local_parents[k];
    }
    for (const auto& term : seg.terms) {
      out.contributions.push_back({static_cast<int32_t>(row),
                                   static_cast<int32_t>(start + term.col), term.advantage,
                                   term.weight, term.behaviour_logprob});
    }
    out.real_tokens += seg.size();
  }
  return out;
}

// Adds the nodes on an item's selected paths to `seg`, a node whose parent and token are
// already there (another execution of the group reached the same prefix) onto that one, and
// the item's contributions. Nodes are visited in creation order: a parent always comes first.
absl::Status AddTree(const TreeTrainingItem& item, std::span<const float> path_weights,
                     TreeWeighting weighting, int64_t num_items,
                     absl::flat_hash_map<uint64_t, int32_t>& children, Segment& seg) {
  const TrajectoryTree& tree = *item.tree;
  std::vector<std::vector<size_t>> paths_through(tree.NumNodes());
  for (size_t p = 0; p < item.paths.size(); ++p) {
    for (int32_t n : tree.PathNodes(item.paths[p])) paths_through[n].push_back(p);
  }
  if (seg.name.empty()) seg.name = tree.execution_id();
  std::vector<int32_t> local(tree.NumNodes(), -1);
  int64_t unique_trainable = 0;
  for (int32_t n = 0; n < tree.NumNodes(); ++n) {
    if (paths_through[n].empty()) continue;
    const TreeNode& node = tree.nodes()[n];
    const int64_t parent = node.parent < 0 ? -1 : local[node.parent];
    const uint64_t key =
        static_cast<uint64_t>(parent + 1) << 32 | static_cast<uint32_t>(node.token);
    const auto [it, added] = children.try_emplace(key, static_cast<int32_t>(seg.size()));
    if (added) {
      seg.tokens.push_back(node.token);
      seg.local_parents.push_back(parent);
      seg.positions.push_back(node.depth);
    }
    local[n] = it->second;
    unique_trainable += node.trainable ? 1 : 0;
  }
  for (int32_t n = 0; n < tree.NumNodes(); ++n) {
    const TreeNode& node = tree.nodes()[n];
    if (paths_through[n].empty() || !node.trainable) continue;
    if (auto s = CheckScorable(tree, n); !s.ok()) return s;
    const auto& through = paths_through[n];
    if (weighting == TreeWeighting::kExact) {
      for (size_t p : through) {
        seg.terms.push_back({local[n], item.advantages[p], path_weights[p], node.logprob});
      }
    } else {
      float mean = 0.0f;
      for (size_t p : through) mean += item.advantages[p];
      mean /= static_cast<float>(through.size());
      const float w = 1.0f / (static_cast<float>(unique_trainable) * static_cast<float>(num_items));
      seg.terms.push_back({local[n], mean, w, node.logprob});
    }
  }
  return absl::OkStatus();
}

// One segment per item, or per group of items (PackTrees).
absl::StatusOr<std::vector<Segment>> TreeSegments(std::span<const TreeTrainingItem> items,
                                                  TreeWeighting weighting,
                                                  PathAggregation aggregation) {
  auto path_weights = PathWeights(items, aggregation);
  if (!path_weights.ok()) return path_weights.status();
  std::vector<Segment> segments;
  // (parent + 1) << 32 | token → node, per segment
  std::vector<absl::flat_hash_map<uint64_t, int32_t>> children;
  absl::flat_hash_map<int64_t, size_t> segment_of_group;
  for (size_t i = 0; i < items.size(); ++i) {
    size_t s = segments.size();
    if (items[i].group >= 0) s = segment_of_group.try_emplace(items[i].group, s).first->second;
    if (s == segments.size()) {
      segments.emplace_back();
      children.emplace_back();
    }
    if (auto st = AddTree(items[i], (*path_weights)[i], weighting,
                          static_cast<int64_t>(items.size()), children[s], segments[s]);
        !st.ok()) {
      return st;
    }
  }
  return segments;
}

absl::StatusOr<std::vector<Segment>> FlatSegments(std::span<const TreeTrainingItem> items,
                                                  PathAggregation aggregation) {
  auto path_weights = PathWeights(items, aggregation);
  if (!path_weights.ok()) return path_weights.status();
  std::vector<Segment> segments;
  for (size_t i = 0; i < items.size(); ++i) {
    const TrajectoryTree& tree = *items[i].tree;
    for (size_t p = 0; p < items[i].paths.size(); ++p) {
      Segment seg;
      seg.name = tree.execution_id();
      const std::vector<int32_t> nodes = tree.PathNodes(items[i].paths[p]);
      for (size_t k = 0; k < nodes.size(); ++k) {
        const TreeNode& node = tree.nodes()[nodes[k]];
        seg.tokens.push_back(node.token);
        seg.local_parents.push_back(static_cast<int64_t>(k) - 1);
        seg.positions.push_back(static_cast<int32_t>(k));
        if (!node.trainable) continue;
        if (auto s = CheckScorable(tree, nodes[k]); !s.ok()) return s;
        seg.terms.push_back(
            {static_cast<int32_t>(k), items[i].advantages[p], (*path_weights)[i][p], node.logprob});
      }
      segments.push_back(std::move(seg));
    }
  }
  return segments;
}

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

absl::StatusOr<PackedTrees> PackTrees(std::span<const TreeTrainingItem> items, int64_t length,
                                      TreeWeighting weighting, PathAggregation aggregation) {
  auto segments = TreeSegments(items, weighting, aggregation);
  if (!segments.ok()) return segments.status();
  return Layout(*segments, length);
}

absl::StatusOr<PackedTrees> PackFlatPaths(std::span<const TreeTrainingItem> items, int64_t length,
                                          PathAggregation aggregation) {
  auto segments = FlatSegments(items, aggregation);
  if (!segments.ok()) return segments.status();
  return Layout(*segments, length);
}

absl::StatusOr<PackedTrees> PackRows(std::span<const TreeTrainingItem> items, bool flat,
                                     TreeWeighting weighting, PathAggregation aggregation,
                                     int64_t row_multiple) {
  if (row_multiple <= 0) return absl::InvalidArgumentError("row_multiple must be > 0");
  auto segments =
      flat ? FlatSegments(items, aggregation) : TreeSegments(items, weighting, aggregation);
  if (!segments.ok()) return segments.status();
  int64_t largest = 1;
  for (const Segment& seg : *segments) largest = std::max(largest, seg.size());
  const int64_t shortest = RoundUp(largest, row_multiple);
  PackedTrees best;
  for (const int64_t length : {shortest, RoundUp(shortest * 3 / 2, row_multiple), 2 * shortest}) {
    auto packed = Layout(*segments, length);
    if (!packed.ok()) return packed.status();
    if (best.rows == 0 || packed->rows * packed->length < best.rows * best.length) {
      best = std::move(*packed);
    }
  }
  return best;
}

}  // namespace flywheel
