// A directory of training checkpoints, each written atomically and complete only with its marker
// (LevelDB's SetCurrentFile, Reverb's DONE):
//
//   checkpoints/
//     step-0000000200/          complete: has DONE
//       model/ …                written by the pluggable model writer (safetensors)
//       trainer_state.pt        optimiser state, step, version, RNG states (trainer_state.h)
//       DONE
//     step-0000000300/          complete
//     .tmp-step-0000000400-…/   a writer that crashed: ignored, removed by the next Save
//
// Save writes every part into a temporary directory, fsyncs every file and directory, writes
// DONE, renames the directory into place and fsyncs the parent, then deletes all but the newest
// `keep_last` complete checkpoints. A directory without DONE is never loaded. One writer per
// directory (the learner's rank 0); not thread-safe.
//
// What makes a save durable (DONE, the fsyncs, the rename, the parent's fsync) goes through a
// rocksdb::FileSystem, the default one unless `file_system` names another: the power-cut tests
// give it a FaultInjectionFileSystem (buffer/fault_injection_fs.h), which drops what was never
// synced. The parts are written by the Writer with whatever I/O it likes; Save fsyncs them all.
#ifndef FLYWHEEL_LEARNER_CHECKPOINT_H_
#define FLYWHEEL_LEARNER_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rocksdb {
class FileSystem;
}

namespace flywheel {

// The model's weights in a full (unsharded) checkpoint, as safetensors.
inline constexpr const char* kCheckpointModelFile = "model.safetensors";

struct CheckpointOptions {
  std::string directory;
  int64_t keep_last = 3;
  // Null: rocksdb::FileSystem::Default(), the operating system's.
  std::shared_ptr<rocksdb::FileSystem> file_system = nullptr;
  // Tests only: false skips every fsync, to prove that the power-cut test catches a missing one.
  bool sync = true;
};

class CheckpointManager {
 public:
  // Writes the parts of one checkpoint into `dir` (an empty, not yet visible directory).
  using Writer = std::function<absl::Status(const std::string& dir)>;

  static constexpr const char* kDoneMarker = "DONE";

  explicit CheckpointManager(CheckpointOptions options);

  // Writes checkpoint `step` atomically; returns its final path. On any error nothing becomes
  // visible and the temporary directory is removed.
  absl::StatusOr<std::string> Save(int64_t step, const Writer& writer);

  // Steps of the complete checkpoints, ascending.
  absl::StatusOr<std::vector<int64_t>> CompleteSteps() const;
  // The newest complete checkpoint's path, or nullopt when there is none.
  absl::StatusOr<std::optional<std::string>> Latest() const;

  std::string PathFor(int64_t step) const;
  const CheckpointOptions& options() const { return options_; }

 private:
  absl::Status Prune();
  absl::Status RemoveTemporaries() const;
  absl::Status SyncFile(const std::string& path) const;
  absl::Status SyncDirectory(const std::string& path) const;
  absl::Status SyncTree(const std::string& root) const;
  absl::Status RemoveTree(const std::string& root) const;
  absl::Status WriteDoneMarker(const std::string& dir, int64_t step) const;

  CheckpointOptions options_;
  std::shared_ptr<rocksdb::FileSystem> fs_;
  int64_t save_counter_ = 0;
};

// fsyncs a file or a directory (so that a rename into it or a file in it is durable).
absl::Status FsyncPath(const std::string& path);

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_CHECKPOINT_H_
