#include "flywheel/trajectory/trajectory_tree.h"

#include <algorithm>
#include <cmath>

#include "flywheel/core/strings.h"

namespace flywheel {

int32_t TrajectoryTree::Child(int32_t parent, int32_t token) {
  const uint64_t key = (static_cast<uint64_t>(parent + 1) << 32) | static_cast<uint32_t>(token);
  auto [it, inserted] = children_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    TreeNode node;
    node.token = token;
    node.parent = parent;
    node.depth = parent < 0 ? 0 : nodes_[parent].depth + 1;
    nodes_.push_back(node);
  }
  return it->second;
}

absl::Status TrajectoryTree::AddPath(const std::string& id, Role role,
                                     std::span<const int32_t> tokens,
                                     std::span<const uint8_t> trainable,
                                     std::span<const float> logprobs,
                                     std::span<const int64_t> versions, int64_t start_unix_ns) {
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        StrCat("execution '", execution_id_, "' path '", id, "': no tokens"));
  }
  if (trainable.size() != tokens.size() || logprobs.size() != tokens.size() ||
      versions.size() != tokens.size()) {
    return absl::InvalidArgumentError(StrCat("execution '", execution_id_, "' path '", id,
                                             "': per-token arrays differ in length"));
  }
  int32_t node = -1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    node = Child(node, tokens[i]);
    if (!trainable[i]) continue;
    TreeNode& n = nodes_[node];
    if (!n.trainable) {
      n.trainable = true;
      n.logprob = logprobs[i];
      n.version = versions[i];
    } else if (std::abs(n.logprob - logprobs[i]) > 1e-6f) {
      ++logprob_conflicts_;
    }
  }

  // An identical path (same leaf) folds into the existing one, which keeps the higher-priority
  // role.
  for (TreePath& existing : paths_) {
    if (existing.leaf == node) {
      existing.duplicate_ids.push_back(id);
      if (role < existing.role) existing.role = role;
      return absl::OkStatus();
    }
  }
  TreePath path;
  path.id = id;
  path.role = role;
  path.leaf = node;
  path.length = static_cast<int32_t>(tokens.size());
  path.start_unix_ns = start_unix_ns;
  paths_.push_back(std::move(path));
  return absl::OkStatus();
}

std::vector<TreePath> TrajectoryTree::Paths() const {
  // below[n] has bit r set when a path of role r continues strictly below node n.
  std::vector<uint8_t> below(nodes_.size(), 0);
  for (const TreePath& p : paths_) {
    const uint8_t bit = 1u << static_cast<int>(p.role);
    for (int32_t n = nodes_[p.leaf].parent; n >= 0 && !(below[n] & bit); n = nodes_[n].parent) {
      below[n] |= bit;
    }
  }
  std::vector<TreePath> out;
  std::vector<const TreePath*> absorbed;
  for (const TreePath& p : paths_) {
    if (below[p.leaf] & (1u << static_cast<int>(p.role))) {
      absorbed.push_back(&p);
    } else {
      out.push_back(p);
    }
  }
  // Record each absorbed prefix on the first path of its role that extends it.
  for (const TreePath* a : absorbed) {
    for (TreePath& p : out) {
      if (p.role != a->role) continue;
      int32_t n = p.leaf;
      while (n >= 0 && nodes_[n].depth > nodes_[a->leaf].depth) n = nodes_[n].parent;
      if (n == a->leaf) {
        p.absorbed_ids.push_back(a->id);
        p.absorbed_ids.insert(p.absorbed_ids.end(), a->duplicate_ids.begin(),
                              a->duplicate_ids.end());
        break;
      }
    }
  }
  return out;
}

std::vector<int32_t> TrajectoryTree::PathNodes(const TreePath& path) const {
  std::vector<int32_t> out;
  for (int32_t n = path.leaf; n >= 0; n = nodes_[n].parent) out.push_back(n);
  std::reverse(out.begin(), out.end());
  return out;
}

int64_t TrajectoryTree::NumPathTokens() const {
  int64_t total = 0;
  for (const TreePath& p : Paths()) total += p.length;
  return total;
}

absl::StatusOr<TrajectoryTree> TrajectoryTree::FromExecution(const Execution& execution) {
  if (auto s = execution.Validate(); !s.ok()) return s;
  TrajectoryTree tree(execution.execution_id);
  for (const LlmCall& call : execution.calls) {
    const size_t n = call.context.size() + call.generated.size();
    std::vector<int32_t> tokens(call.context);
    tokens.insert(tokens.end(), call.generated.begin(), call.generated.end());
    std::vector<uint8_t> trainable(n, 0);
    std::vector<float> logprobs(n, kNoLogprob);
    std::vector<int64_t> versions(n, kNoVersion);
    for (size_t i = 0; i < call.generated.size(); ++i) {
      trainable[call.context.size() + i] = 1;
      logprobs[call.context.size() + i] = call.logprobs[i];
      versions[call.context.size() + i] = call.versions[i];
    }
    if (auto s = tree.AddPath(call.call_id, call.role, tokens, trainable, logprobs, versions,
                              call.start_unix_ns);
        !s.ok()) {
      return s;
    }
  }
  return tree;
}

absl::StatusOr<TrajectoryTree> TrajectoryTree::FromTrajectories(
    std::span<const Trajectory> paths) {
  if (paths.empty()) return absl::InvalidArgumentError("no trajectories to build a tree from");
  TrajectoryTree tree(paths.front().execution_id);
  for (const Trajectory& t : paths) {
    if (t.execution_id != tree.execution_id_) {
      return absl::InvalidArgumentError(StrCat("trajectory '", t.id, "' belongs to execution '",
                                               t.execution_id, "', not '", tree.execution_id_,
                                               "'"));
    }
    if (auto s = t.Validate(); !s.ok()) return s;
    if (auto s = tree.AddPath(t.id, t.role, t.tokens, t.trainable, t.logprobs, t.versions,
                              t.created_unix_ns);
        !s.ok()) {
      return s;
    }
  }
  return tree;
}

}  // namespace flywheel
