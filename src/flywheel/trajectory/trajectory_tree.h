// A prefix tree of the token paths of one agent execution.
//
// Paths that share a prefix (retries from an earlier point, turns of one conversation) share
// nodes, so a shared prefix is stored — and later computed — once:
//
//   path A:  p p p a a o a          root ─ p ─ p ─ p ─ a ─ a ─ o ─ a      (A)
//   path B:  p p p a x x                               └─ x ─ x          (B, a retry)
//
// A node is trainable iff some path has the policy generate that exact token at that exact
// prefix; a context token that merely repeats generated text elsewhere is a different node and
// stays an observation. Identical paths are deduplicated; a path that is a strict prefix of
// another path of the same role (an earlier turn of the same conversation) is absorbed into it.
#ifndef FLYWHEEL_TRAJECTORY_TRAJECTORY_TREE_H_
#define FLYWHEEL_TRAJECTORY_TRAJECTORY_TREE_H_

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/trajectory/llm_call.h"

namespace flywheel {

struct TreeNode {
  int32_t token = 0;
  int32_t parent = -1;  // index into nodes(); -1 for a root
  int32_t depth = 0;    // root = 0; also the rotary position when packed
  bool trainable = false;
  float logprob = kNoLogprob;  // behaviour log μ of the generating path
  int64_t version = kNoVersion;
};

struct TreePath {
  std::string id;
  Role role = Role::kMain;
  int32_t leaf = -1;  // last node of the path
  int32_t length = 0;
  int64_t start_unix_ns = 0;
  std::vector<std::string> duplicate_ids;  // identical paths folded into this one
  std::vector<std::string> absorbed_ids;   // same-role strict prefixes folded into this one
};

class TrajectoryTree {
 public:
  explicit TrajectoryTree(std::string execution_id) : execution_id_(std::move(execution_id)) {}

  // One tree from the calls of an execution: each call is the path context + generated.
  static absl::StatusOr<TrajectoryTree> FromExecution(const Execution& execution);
  // One tree from the paths flywheel's own actors produced for one execution.
  static absl::StatusOr<TrajectoryTree> FromTrajectories(std::span<const Trajectory> paths);

  // Adds one path; per-token arrays of equal length, as in Trajectory.
  absl::Status AddPath(const std::string& id, Role role, std::span<const int32_t> tokens,
                       std::span<const uint8_t> trainable, std::span<const float> logprobs,
                       std::span<const int64_t> versions, int64_t start_unix_ns = 0);

  const std::string& execution_id() const { return execution_id_; }
  const std::vector<TreeNode>& nodes() const { return nodes_; }
  // Distinct paths in insertion order, after deduplication and absorption.
  std::vector<TreePath> Paths() const;
  // Node indices of a path, root first.
  std::vector<int32_t> PathNodes(const TreePath& path) const;

  // Tokens stored once in the tree vs. the sum of the lengths of the distinct paths.
  int64_t NumNodes() const { return static_cast<int64_t>(nodes_.size()); }
  int64_t NumPathTokens() const;
  // Generated tokens whose recorded log-prob disagreed with an earlier path through the same
  // node (the first one is kept).
  int64_t logprob_conflicts() const { return logprob_conflicts_; }

 private:
  int32_t Child(int32_t parent, int32_t token);

  std::string execution_id_;
  std::vector<TreeNode> nodes_;
  std::unordered_map<uint64_t, int32_t> children_;  // (parent + 1) << 32 | token → node
  std::vector<TreePath> paths_;                     // one per distinct leaf
  int64_t logprob_conflicts_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_TRAJECTORY_TRAJECTORY_TREE_H_
