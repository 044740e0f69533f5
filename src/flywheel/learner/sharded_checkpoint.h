// Sharded, re-shardable training checkpoints on top of CheckpointManager's atomic directory:
// every rank of the learner's group writes its slice of the flat training state (sharding.h:
// each unit's parameters and AdamW moments, flattened and padded to a multiple of N), rank 0
// adds one manifest and commits the directory with DONE.
//
//   checkpoints/step-0000000300/
//     manifest.json                 world size N, step, version, units (name, length, shard
//                                   length, padding), shard file names
//     shard-00000-of-00004.pt       rank 0: per unit u: u<i>_param, u<i>_exp_avg,
//     …                             u<i>_exp_avg_sq ([shard_length] each), counters
//     DONE
//
//   save (every rank):   ExportShard ─▶ .staging-step-…/shard-r ─▶ barrier ─▶ rank 0: Save
//                        (moves the shards in, writes the manifest, DONE, rename) ─▶ barrier
//   load at M ranks:     each unit = concat of the N shards' slices, unpadded ─▶ ImportState
//                        takes this rank's new slice (or all of it, data parallel)
//
// A save is in any sharding mode and loads in any other of the same model and unit layout; at
// the same N and mode the restored state is bit-identical. The ranks must share the checkpoint
// directory's file system. A load reads every shard (the whole state passes through each rank
// once); reading only the overlapping shards is a possible refinement.
#ifndef FLYWHEEL_LEARNER_SHARDED_CHECKPOINT_H_
#define FLYWHEEL_LEARNER_SHARDED_CHECKPOINT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/learner/checkpoint.h"
#include "flywheel/learner/learner_step.h"
#include "flywheel/learner/sharding.h"

namespace flywheel {

inline constexpr const char* kShardManifestFile = "manifest.json";

// Every rank of `comm` calls it (null comm = one process) with its learner, after the same
// step; `manager` is over the same directory on every rank, only rank 0's writes. Returns the
// checkpoint's path (step = the learner's optimiser step).
// `extra` (optional) writes more files into the checkpoint on rank 0 before it becomes visible.
absl::StatusOr<std::string> SaveShardedCheckpoint(CheckpointManager& manager, LearnerStep& learner,
                                                  dist::Communicator* comm,
                                                  const CheckpointManager::Writer& extra = nullptr);

// Restores a complete sharded checkpoint (`checkpoint_dir` with DONE) into `learner`, at
// whatever group size and sharding mode the learner has. Every rank calls it; no collectives.
absl::Status LoadShardedCheckpoint(const std::string& checkpoint_dir, LearnerStep& learner);

// The pieces, for tools and tests: one rank's shard file, and the whole units of a checkpoint.
absl::Status WriteShardFile(const std::string& path, const TrainerShard& shard);
absl::StatusOr<TrainerShard> ReadShardFile(const std::string& path);
absl::StatusOr<TrainerShard> ReadWholeUnits(const std::string& checkpoint_dir);

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_SHARDED_CHECKPOINT_H_
